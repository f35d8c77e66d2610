-- Listings of finished jobs by state, filtered by queue or type as well
-- (the dashboard's jobs and dead letters pages), read the ids from this
-- index alone (an index-only scan, backwards from the newest) and the rows
-- after: with queue and job_type included, the filters need no heap. The
-- index keeps its predicate, so a job still gets one entry, when it ends
-- (docs/benchmarks.md, "Web pages at 1,000,000 jobs").
CREATE INDEX docket_jobs_state_id_inc ON docket_jobs (state, id) INCLUDE (queue, job_type)
    WHERE state NOT IN ('QUEUED', 'RUNNING');
DROP INDEX docket_jobs_state_id;
ALTER INDEX docket_jobs_state_id_inc RENAME TO docket_jobs_state_id;
