DROP INDEX IF EXISTS docket_steps_running;
