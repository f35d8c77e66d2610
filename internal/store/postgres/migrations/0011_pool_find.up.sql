-- Finding work (PoolListEligible) reads only OPEN pools: its GIN indexes
-- hold those alone, so closed and completed pools, which pile up, cost it
-- nothing. skills <@ a contributor's skills finds the candidates (the plan
-- TestFindWorkPlan checks); channels && theirs (or channels = '{}') may be
-- served by the second when skills select little.
DROP INDEX docket_pools_skills;
DROP INDEX docket_pools_channels;
CREATE INDEX docket_pools_open_skills ON docket_pools USING gin (skills) WHERE status = 'OPEN';
CREATE INDEX docket_pools_open_channels ON docket_pools USING gin (channels) WHERE status = 'OPEN';
