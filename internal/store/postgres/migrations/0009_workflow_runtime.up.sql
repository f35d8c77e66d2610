-- The workflow sweeper's safety net: the step instances that are RUNNING
-- (their job, unit or signal wait exists). A small, partial index: a step
-- leaves it as soon as it ends, so it holds only what is in flight. It
-- serves StepRunsToAdvance (RUNNING job steps whose job ended, joined to
-- docket_jobs by primary key), StepSignalsWaiting (RUNNING signal steps,
-- oldest first) and StepJobEnds (the running instances of one run).
CREATE INDEX docket_steps_running ON docket_steps (kind, started_at)
    INCLUDE (run_id, job_id) WHERE state = 'RUNNING';

-- A cancel of a run with running step jobs waits for them to stop: the run
-- stays RUNNING or PAUSED with this flag, and becomes CANCELED once
-- nothing runs.
ALTER TABLE docket_runs ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;
