-- The workflow sweeper's safety net (see PostgreSQL's 0009_workflow_runtime):
-- the RUNNING step instances only, by kind and start.
CREATE INDEX docket_steps_running ON docket_steps (kind, started_at, run_id, job_id)
    WHERE state = 'RUNNING';

-- A cancel waiting for running step jobs (see PostgreSQL's).
ALTER TABLE docket_runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
