-- Finding work (PoolListEligible) walks the OPEN pools in the order it
-- answers in (priority, then age), checking each one's skills and
-- channels, and stops at its limit.
CREATE INDEX docket_pools_open_order ON docket_pools (priority, created_at, id) WHERE status = 'OPEN';
