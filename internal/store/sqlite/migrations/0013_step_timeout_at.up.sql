-- A signal step's deadline (see PostgreSQL's 0014_step_timeout_at), in
-- microseconds like every time here.
ALTER TABLE docket_steps ADD COLUMN timeout_at INTEGER;
UPDATE docket_steps SET timeout_at = started_at WHERE state = 'RUNNING' AND kind = 'signal';
CREATE INDEX docket_steps_timeout ON docket_steps (timeout_at)
    WHERE state = 'RUNNING' AND timeout_at IS NOT NULL;
