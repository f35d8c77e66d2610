CREATE INDEX docket_jobs_type_id ON docket_jobs (job_type, id) WHERE state NOT IN ('QUEUED', 'RUNNING');
DROP INDEX docket_jobs_state_id;
CREATE INDEX docket_jobs_state_id ON docket_jobs (state, id) WHERE state NOT IN ('QUEUED', 'RUNNING');
