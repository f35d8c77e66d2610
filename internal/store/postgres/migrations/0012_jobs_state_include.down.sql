CREATE INDEX docket_jobs_state_id_old ON docket_jobs (state, id) WHERE state NOT IN ('QUEUED', 'RUNNING');
DROP INDEX docket_jobs_state_id;
ALTER INDEX docket_jobs_state_id_old RENAME TO docket_jobs_state_id;
