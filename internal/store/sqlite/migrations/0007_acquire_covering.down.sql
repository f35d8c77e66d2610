DROP INDEX docket_jobs_acquire;
CREATE INDEX docket_jobs_acquire ON docket_jobs (queue, sort_at, id) WHERE state = 'QUEUED';
