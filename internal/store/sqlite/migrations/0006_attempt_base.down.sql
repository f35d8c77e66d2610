ALTER TABLE docket_jobs DROP COLUMN attempt_base;
