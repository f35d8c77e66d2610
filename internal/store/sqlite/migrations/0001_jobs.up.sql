-- SQLite mirror of the PostgreSQL schema: same tables, columns and indexes.
-- ids are canonical uuid strings (they sort in UUIDv7 time order), instants
-- are INTEGER unix microseconds (UTC), JSON is TEXT, booleans are 0/1.
CREATE TABLE docket_jobs (
    id               TEXT    NOT NULL PRIMARY KEY,
    job_type         TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    priority         INTEGER NOT NULL,
    payload          TEXT    NOT NULL,
    result           TEXT,
    idempotency_key  TEXT,
    state            TEXT    NOT NULL,
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    run_at           INTEGER NOT NULL,
    -- run_at + priority × aging: the acquisition order (priority with aging).
    sort_at          INTEGER NOT NULL,
    timeout_ms       INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    attempted_at     INTEGER,
    progress         REAL    NOT NULL DEFAULT 0,
    progress_message TEXT    NOT NULL DEFAULT '',
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    version          INTEGER NOT NULL DEFAULT 1,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    finished_at      INTEGER,
    last_error       TEXT    NOT NULL DEFAULT ''
) STRICT;

CREATE UNIQUE INDEX docket_jobs_idempotency_key ON docket_jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
-- Acquisition: due work of one queue in sort order.
CREATE INDEX docket_jobs_acquire ON docket_jobs (queue, sort_at, id) WHERE state = 'QUEUED';
-- Scheduler (RETRY -> QUEUED) and rescuer (expired RUNNING leases).
CREATE INDEX docket_jobs_retry_due ON docket_jobs (run_at) WHERE state = 'RETRY';
CREATE INDEX docket_jobs_lease_expiry ON docket_jobs (lease_expires_at) WHERE state = 'RUNNING';
-- Listing filters, newest first, and the pruner. Every state change of a
-- job writes a new entry into every index whose predicate the new row
-- matches (a state change is never a HOT update: state is in the
-- predicates above), so the hot path QUEUED -> RUNNING -> SUCCESS must
-- touch as few as possible. The state and type indexes leave out QUEUED and
-- RUNNING, so a job gets one entry in each when it ends, none on the way:
-- waiting and running jobs are listed through docket_jobs_acquire,
-- docket_jobs_lease_expiry or the primary key (the newest jobs are the
-- waiting ones); a listing whose states are all outside QUEUED and RUNNING
-- spells out the predicate so that generic plans can use them too. Counts
-- by queue and state read the table (docs/benchmarks.md).
CREATE INDEX docket_jobs_state_id ON docket_jobs (state, id) WHERE state NOT IN ('QUEUED', 'RUNNING');
CREATE INDEX docket_jobs_type_id ON docket_jobs (job_type, id) WHERE state NOT IN ('QUEUED', 'RUNNING');
CREATE INDEX docket_jobs_finished ON docket_jobs (finished_at) WHERE finished_at IS NOT NULL;

-- History of finished attempts. A manual retry resets a job's attempt counter,
-- so (job_id, attempt) can repeat: rows are keyed by a rowid in insertion
-- order (oldest first), and one index under the job's id serves both the
-- history listing and the pruner, which deletes a job's attempts with it.
-- No foreign key, as on PostgreSQL: attempt rows are only written by the
-- statement that ends the attempt on the job's row.
CREATE TABLE docket_job_attempts (
    id          INTEGER PRIMARY KEY,
    job_id      TEXT    NOT NULL,
    attempt     INTEGER NOT NULL,
    node        TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    outcome     TEXT    NOT NULL,
    error       TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX docket_job_attempts_job ON docket_job_attempts (job_id, id);

CREATE TABLE docket_outbox (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    event_type   TEXT    NOT NULL,
    data         TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    published_at INTEGER
) STRICT;
CREATE INDEX docket_outbox_unpublished ON docket_outbox (id) WHERE published_at IS NULL;

CREATE TABLE docket_queues (
    name       TEXT    NOT NULL PRIMARY KEY,
    paused     INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NOT NULL
) STRICT;

CREATE TABLE docket_nodes (
    id          TEXT    NOT NULL PRIMARY KEY,
    hostname    TEXT    NOT NULL,
    pid         INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    last_active INTEGER NOT NULL
) STRICT;

CREATE TABLE docket_leader (
    name       TEXT    NOT NULL PRIMARY KEY,
    node_id    TEXT    NOT NULL,
    elected_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
