-- Workflows: definitions and their versions, runs, step instances. The same
-- schema as on PostgreSQL (see its 0008_workflows.up.sql): times are unix
-- microseconds, uuids and JSON are TEXT. Writes are serialised by the one
-- writer connection, so docket_workflows needs no lock to number versions.
CREATE TABLE docket_workflows (
    name           TEXT    NOT NULL PRIMARY KEY,
    latest_version INTEGER NOT NULL,
    latest_hash    TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
) STRICT;

CREATE TABLE docket_workflow_versions (
    name       TEXT    NOT NULL REFERENCES docket_workflows (name),
    version    INTEGER NOT NULL CHECK (version >= 1),
    hash       TEXT    NOT NULL,
    definition TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (name, version)
) STRICT;

CREATE TABLE docket_runs (
    id              TEXT    NOT NULL PRIMARY KEY,
    workflow        TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('RUNNING', 'PAUSED', 'SUCCEEDED', 'FAILED', 'CANCELED')),
    input           TEXT    NOT NULL,
    output          TEXT,
    error           TEXT    NOT NULL DEFAULT '',
    idempotency_key TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    finished_at     INTEGER,
    FOREIGN KEY (workflow, version) REFERENCES docket_workflow_versions (name, version)
) STRICT;
CREATE UNIQUE INDEX docket_runs_idempotency ON docket_runs (workflow, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX docket_runs_workflow_id ON docket_runs (workflow, id);
CREATE INDEX docket_runs_state_id ON docket_runs (state, id);

CREATE TABLE docket_steps (
    run_id      TEXT    NOT NULL REFERENCES docket_runs (id) ON DELETE CASCADE,
    step        TEXT    NOT NULL,
    step_index  INTEGER NOT NULL CHECK (step_index >= 0),
    kind        TEXT    NOT NULL CHECK (kind IN ('job', 'signal', 'human')),
    generation  INTEGER NOT NULL DEFAULT 1,
    state       TEXT    NOT NULL CHECK (state IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELED')),
    job_id      TEXT,
    unit_id     TEXT,
    output      TEXT,
    error       TEXT    NOT NULL DEFAULT '',
    confidence  REAL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    started_at  INTEGER,
    finished_at INTEGER,
    PRIMARY KEY (run_id, step, step_index)
) STRICT, WITHOUT ROWID;
CREATE UNIQUE INDEX docket_steps_job ON docket_steps (job_id) WHERE job_id IS NOT NULL;
CREATE UNIQUE INDEX docket_steps_unit ON docket_steps (unit_id) WHERE unit_id IS NOT NULL;
