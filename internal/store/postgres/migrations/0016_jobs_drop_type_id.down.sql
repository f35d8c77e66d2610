CREATE INDEX docket_jobs_type_id ON docket_jobs (job_type, id) WHERE state NOT IN ('QUEUED', 'RUNNING');
