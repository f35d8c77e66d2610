-- A finished job wrote an entry into docket_jobs_type_id (job_type, id)
-- besides docket_jobs_state_id, whose entry already carries job_type
-- (INCLUDE, 0012): one of the eight index entries a job costs, about 100 of
-- its ~1,550 WAL bytes (docs/benchmarks.md, "Index entries per job"). No
-- listing's plan used it: a type filter with finished states reads
-- docket_jobs_state_id index-only, a type filter over all states could not
-- use a partial index that leaves out QUEUED and RUNNING.
DROP INDEX docket_jobs_type_id;
