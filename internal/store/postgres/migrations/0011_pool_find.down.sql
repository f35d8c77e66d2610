DROP INDEX docket_pools_open_channels;
DROP INDEX docket_pools_open_skills;
CREATE INDEX docket_pools_skills ON docket_pools USING gin (skills);
CREATE INDEX docket_pools_channels ON docket_pools USING gin (channels);
