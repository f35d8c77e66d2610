-- Workflows: definitions and their versions, runs, step instances.
--
-- docket_workflows is one row per workflow name, the head of its versions:
-- WorkflowPut locks it (INSERT … ON CONFLICT DO UPDATE) so that puts of one
-- name are serialised and versions are numbered without gaps.
CREATE TABLE docket_workflows (
    name           text        PRIMARY KEY,
    latest_version integer     NOT NULL,
    latest_hash    text        NOT NULL,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL
);

-- definition is the canonical JSON of the version, kept byte for byte
-- (json, not jsonb); hash is its "sha256:<hex>".
CREATE TABLE docket_workflow_versions (
    name       text        NOT NULL REFERENCES docket_workflows (name),
    version    integer     NOT NULL CHECK (version >= 1),
    hash       text        NOT NULL,
    definition json        NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (name, version)
);

-- A run is pinned to one version. The idempotency key is unique per
-- workflow, across its versions.
CREATE TABLE docket_runs (
    id              uuid        PRIMARY KEY,
    workflow        text        NOT NULL,
    version         integer     NOT NULL,
    state           text        NOT NULL CHECK (state IN ('RUNNING', 'PAUSED', 'SUCCEEDED', 'FAILED', 'CANCELED')),
    input           jsonb       NOT NULL,
    output          jsonb,
    error           text        NOT NULL DEFAULT '',
    idempotency_key text,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    finished_at     timestamptz,
    FOREIGN KEY (workflow, version) REFERENCES docket_workflow_versions (name, version)
);
CREATE UNIQUE INDEX docket_runs_idempotency ON docket_runs (workflow, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- RunList: newest first by workflow, by state.
CREATE INDEX docket_runs_workflow_id ON docket_runs (workflow, id);
CREATE INDEX docket_runs_state_id ON docket_runs (state, id);

-- One row per step instance: (run, step, index) is unique, which makes a
-- release happen once. generation grows on each reset by a retry and
-- guards every change. job_id and unit_id find the instance a finished job
-- or a finalized unit belongs to.
CREATE TABLE docket_steps (
    run_id      uuid        NOT NULL REFERENCES docket_runs (id) ON DELETE CASCADE,
    step        text        NOT NULL,
    step_index  integer     NOT NULL CHECK (step_index >= 0),
    kind        text        NOT NULL CHECK (kind IN ('job', 'signal', 'human')),
    generation  integer     NOT NULL DEFAULT 1,
    state       text        NOT NULL CHECK (state IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELED')),
    job_id      uuid,
    unit_id     uuid,
    output      jsonb,
    error       text        NOT NULL DEFAULT '',
    confidence  double precision,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    started_at  timestamptz,
    finished_at timestamptz,
    PRIMARY KEY (run_id, step, step_index)
);
CREATE UNIQUE INDEX docket_steps_job ON docket_steps (job_id) WHERE job_id IS NOT NULL;
CREATE UNIQUE INDEX docket_steps_unit ON docket_steps (unit_id) WHERE unit_id IS NOT NULL;
