DROP INDEX IF EXISTS docket_steps_running;
ALTER TABLE docket_runs DROP COLUMN cancel_requested;
