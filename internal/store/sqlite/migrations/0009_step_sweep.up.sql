-- The workflow sweeper's safety net (see PostgreSQL's 0009_step_sweep):
-- the RUNNING step instances only, by kind and start.
CREATE INDEX docket_steps_running ON docket_steps (kind, started_at, run_id, job_id)
    WHERE state = 'RUNNING';
