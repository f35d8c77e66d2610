-- attempt is the lease's fencing token and never goes back: a manual
-- retry gives the job a fresh budget of attempts by moving attempt_base up
-- to attempt instead of resetting attempt, so an old lease id can never
-- match a new attempt. Attempts used = attempt - attempt_base.
ALTER TABLE docket_jobs ADD COLUMN attempt_base INTEGER NOT NULL DEFAULT 0;
