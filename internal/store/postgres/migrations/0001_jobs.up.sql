CREATE TABLE docket_jobs (
    id               uuid PRIMARY KEY,
    job_type         text        NOT NULL,
    queue            text        NOT NULL,
    priority         smallint    NOT NULL,
    payload          jsonb       NOT NULL,
    result           jsonb,
    idempotency_key  text,
    state            text        NOT NULL,
    attempt          integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL,
    run_at           timestamptz NOT NULL,
    -- run_at + priority × aging: the acquisition order (priority with aging).
    sort_at          timestamptz NOT NULL,
    timeout_ms       bigint      NOT NULL DEFAULT 0,
    lease_owner      text,
    lease_expires_at timestamptz,
    attempted_at     timestamptz,
    progress         double precision NOT NULL DEFAULT 0,
    progress_message text        NOT NULL DEFAULT '',
    cancel_requested boolean     NOT NULL DEFAULT false,
    version          integer     NOT NULL DEFAULT 1,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    last_error       text        NOT NULL DEFAULT ''
) WITH (fillfactor = 90);

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
-- so (job_id, attempt) can repeat: rows are keyed by an identity in insertion
-- order (oldest first) instead, under the job's id so one index serves both
-- the history listing and the pruner, which deletes a job's attempts with it.
-- No foreign key: attempt rows are only written by the statement that ends
-- the attempt on the job's row, and its per-row check was a third of the cost
-- of finishing a batch (docs/benchmarks.md).
CREATE TABLE docket_job_attempts (
    id          bigint GENERATED ALWAYS AS IDENTITY,
    job_id      uuid        NOT NULL,
    attempt     integer     NOT NULL,
    node        text        NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    outcome     text        NOT NULL,
    error       text        NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, id)
);

CREATE TABLE docket_outbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_type   text        NOT NULL,
    data         json        NOT NULL,
    created_at   timestamptz NOT NULL,
    published_at timestamptz
);
CREATE INDEX docket_outbox_unpublished ON docket_outbox (id) WHERE published_at IS NULL;

CREATE TABLE docket_queues (
    name       text PRIMARY KEY,
    paused     boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL
);

CREATE TABLE docket_nodes (
    id          text PRIMARY KEY,
    hostname    text        NOT NULL,
    pid         integer     NOT NULL,
    started_at  timestamptz NOT NULL,
    last_active timestamptz NOT NULL
);

CREATE TABLE docket_leader (
    name       text PRIMARY KEY,
    node_id    text        NOT NULL,
    elected_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
