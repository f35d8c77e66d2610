-- A signal step's deadline: started_at plus its definition's timeout, set
-- when the instance is released RUNNING (NULL without a timeout). The
-- sweeper finds the waits that timed out by a range query on this index,
-- however many waits without a timeout (or with a later one) are older.
ALTER TABLE docket_steps ADD COLUMN timeout_at timestamptz;
-- Waits released before this column existed are due for a look at once:
-- the sweeper times them out by their definition, or leaves them waiting.
UPDATE docket_steps SET timeout_at = started_at WHERE state = 'RUNNING' AND kind = 'signal';
CREATE INDEX docket_steps_timeout ON docket_steps (timeout_at)
    WHERE state = 'RUNNING' AND timeout_at IS NOT NULL;
