-- No plan reads these columns of docket_jobs: no statement filters, joins,
-- groups or sorts by them (a payload filter compares expressions over a
-- window already limited, which no column statistics estimate). ANALYZE
-- still sampled and sorted each of them, about 11 ms of a core per column
-- at 200,000 jobs. With their statistics target 0 it skips them, the
-- analyzer's first full pass of a fresh table and autovacuum's alike:
-- about 40 % less CPU per ANALYZE (docs/benchmarks.md, "Round six:
-- acquisition and the analyzer"). The columns plans read (id, job_type,
-- queue, priority, state, attempt, run_at, sort_at, lease_expires_at,
-- finished_at, idempotency_key) keep the default target: job_type's most
-- common values choose between the listing indexes. A column that a new
-- statement filters on must be given its statistics back here
-- (TestJobColumnStatistics).
ALTER TABLE docket_jobs
    ALTER COLUMN payload SET STATISTICS 0,
    ALTER COLUMN result SET STATISTICS 0,
    ALTER COLUMN max_attempts SET STATISTICS 0,
    ALTER COLUMN timeout_ms SET STATISTICS 0,
    ALTER COLUMN lease_owner SET STATISTICS 0,
    ALTER COLUMN attempted_at SET STATISTICS 0,
    ALTER COLUMN progress SET STATISTICS 0,
    ALTER COLUMN progress_message SET STATISTICS 0,
    ALTER COLUMN cancel_requested SET STATISTICS 0,
    ALTER COLUMN version SET STATISTICS 0,
    ALTER COLUMN created_at SET STATISTICS 0,
    ALTER COLUMN updated_at SET STATISTICS 0,
    ALTER COLUMN last_error SET STATISTICS 0,
    ALTER COLUMN attempt_base SET STATISTICS 0;
