DROP INDEX IF EXISTS docket_steps_timeout;
ALTER TABLE docket_steps DROP COLUMN timeout_at;
