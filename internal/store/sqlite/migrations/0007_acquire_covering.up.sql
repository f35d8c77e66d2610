-- Acquisition checks run_at <= now for every candidate of its queue in
-- sort order: with run_at in the index, the candidates are read from the
-- index alone and only the rows acquired are visited (by rowid).
DROP INDEX docket_jobs_acquire;
CREATE INDEX docket_jobs_acquire ON docket_jobs (queue, sort_at, id, run_at) WHERE state = 'QUEUED';
