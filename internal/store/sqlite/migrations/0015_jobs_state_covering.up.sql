-- A finished job wrote an entry into docket_jobs_type_id (job_type, id)
-- besides docket_jobs_state_id (state, id): one of the index entries a job
-- costs (docs/benchmarks.md, "Index entries per job"). The state index now
-- carries queue and job_type after its key, as PostgreSQL's includes them
-- (0012 there): a listing of finished jobs filtered by type or queue reads
-- the filters from its entries, and the type index goes. SQLite cannot
-- rename an index, so the state index is made again under its name.
DROP INDEX docket_jobs_state_id;
CREATE INDEX docket_jobs_state_id ON docket_jobs (state, id, queue, job_type) WHERE state NOT IN ('QUEUED', 'RUNNING');
DROP INDEX docket_jobs_type_id;
