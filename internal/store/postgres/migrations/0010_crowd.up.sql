-- Human work: task templates, pools of units, contributors, assignments
-- (leases of unit slots), judgments, and what a pool knows of each
-- contributor (trust, flags).

-- docket_tasks is the head of a task's versions, as docket_workflows is:
-- TaskPut locks it so versions of one name are numbered without gaps.
CREATE TABLE docket_tasks (
    name           text        PRIMARY KEY,
    latest_version integer     NOT NULL,
    latest_hash    text        NOT NULL,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL
);

CREATE TABLE docket_task_versions (
    name       text        NOT NULL REFERENCES docket_tasks (name),
    version    integer     NOT NULL CHECK (version >= 1),
    hash       text        NOT NULL,
    definition json        NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (name, version)
);

-- One pool per human step of a workflow version. Its counters are in
-- docket_pool_counters.
CREATE TABLE docket_pools (
    id                 uuid        PRIMARY KEY,
    workflow           text        NOT NULL,
    workflow_version   integer     NOT NULL,
    step               text        NOT NULL,
    task               text        NOT NULL,
    task_version       integer     NOT NULL,
    status             text        NOT NULL CHECK (status IN ('OPEN', 'PAUSED', 'CLOSED', 'COMPLETED')),
    priority           integer     NOT NULL DEFAULT 0,
    skills             text[]      NOT NULL DEFAULT '{}',
    channels           text[]      NOT NULL DEFAULT '{}',
    judgments_per_unit integer     NOT NULL CHECK (judgments_per_unit >= 1),
    assignment_seconds integer     NOT NULL CHECK (assignment_seconds >= 1),
    settings           jsonb       NOT NULL DEFAULT '{}',
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    UNIQUE (workflow, workflow_version, step),
    FOREIGN KEY (workflow, workflow_version) REFERENCES docket_workflow_versions (name, version),
    FOREIGN KEY (task, task_version) REFERENCES docket_task_versions (name, version)
);
CREATE INDEX docket_pools_status_id ON docket_pools (status, id);
-- Finding work (next issue) reads skills and channels through these.
CREATE INDEX docket_pools_skills ON docket_pools USING gin (skills);
CREATE INDEX docket_pools_channels ON docket_pools USING gin (channels);

-- A pool's counters, split into shards: every statement that changes what
-- they count moves the counters of one shard, chosen at random, in the
-- same statement. One row per pool would be a lock every take and every
-- judgment of a hot pool waits for (through the commit); shards spread
-- them. A pool's counters are the sums over its shards: exact.
CREATE TABLE docket_pool_counters (
    pool_id            uuid     NOT NULL REFERENCES docket_pools (id) ON DELETE CASCADE,
    shard              smallint NOT NULL,
    units_new          bigint   NOT NULL DEFAULT 0,
    units_judgable     bigint   NOT NULL DEFAULT 0,
    units_paused       bigint   NOT NULL DEFAULT 0,
    units_finalized    bigint   NOT NULL DEFAULT 0,
    units_canceled     bigint   NOT NULL DEFAULT 0,
    units_golden       bigint   NOT NULL DEFAULT 0,
    judgments          bigint   NOT NULL DEFAULT 0,
    active_assignments bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (pool_id, shard)
);

-- A unit of a pool. run_id is the run (root_data_id), step_index the
-- instance of the pool's step in that run; both NULL for a golden unit
-- added by hand. pick_key is a random number drawn at insert, read by the
-- random take strategy. slots_taken counts ACTIVE and SUBMITTED
-- assignments.
CREATE TABLE docket_units (
    id                 uuid        PRIMARY KEY,
    pool_id            uuid        NOT NULL REFERENCES docket_pools (id),
    run_id             uuid,
    step_index         integer     CHECK (step_index >= 0),
    parent_unit_id     uuid,
    input              jsonb       NOT NULL,
    state              text        NOT NULL CHECK (state IN ('NEW', 'JUDGABLE', 'PAUSED', 'FINALIZED', 'CANCELED')),
    golden             boolean     NOT NULL DEFAULT false,
    answer             jsonb,
    pick_key           bigint      NOT NULL,
    slots_taken        integer     NOT NULL DEFAULT 0 CHECK (slots_taken >= 0),
    judgments_per_unit integer     NOT NULL CHECK (judgments_per_unit >= 1),
    judgment_count     integer     NOT NULL DEFAULT 0,
    result             jsonb,
    confidence         double precision,
    finalized_at       timestamptz,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    CHECK (golden = (answer IS NOT NULL))
);
-- The units a take may pick, by age (ordered) and by random key (random):
-- only regular JUDGABLE units with a free slot are in them, so a hot pool's
-- takers never scan past full units.
CREATE INDEX docket_units_open ON docket_units (pool_id, id)
    WHERE state = 'JUDGABLE' AND NOT golden AND slots_taken < judgments_per_unit;
CREATE INDEX docket_units_open_pick ON docket_units (pool_id, pick_key)
    WHERE state = 'JUDGABLE' AND NOT golden AND slots_taken < judgments_per_unit;
CREATE INDEX docket_units_golden ON docket_units (pool_id, id) WHERE golden AND state = 'JUDGABLE';
-- UnitList: newest first by pool, by state; a run's units.
CREATE INDEX docket_units_pool_state_id ON docket_units (pool_id, state, id);
CREATE INDEX docket_units_run ON docket_units (run_id) WHERE run_id IS NOT NULL;

CREATE TABLE docket_contributors (
    id          uuid        PRIMARY KEY,
    external_id text        NOT NULL UNIQUE,
    name        text        NOT NULL DEFAULT '',
    skills      text[]      NOT NULL DEFAULT '{}',
    channels    text[]      NOT NULL DEFAULT '{}',
    state       text        NOT NULL CHECK (state IN ('active', 'flagged', 'banned')),
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

-- A contributor API key is bound to one contributor.
ALTER TABLE docket_api_keys ADD COLUMN contributor_id uuid REFERENCES docket_contributors (id);
CREATE INDEX docket_api_keys_contributor ON docket_api_keys (contributor_id) WHERE contributor_id IS NOT NULL;

-- One row per contributor per pool: trust from test questions and the
-- per-pool flag (quality control).
CREATE TABLE docket_pool_contributors (
    pool_id        uuid        NOT NULL REFERENCES docket_pools (id) ON DELETE CASCADE,
    contributor_id uuid        NOT NULL REFERENCES docket_contributors (id),
    trust          double precision CHECK (trust >= 0 AND trust <= 1),
    tests_answered integer     NOT NULL DEFAULT 0,
    tests_correct  integer     NOT NULL DEFAULT 0,
    flagged        boolean     NOT NULL DEFAULT false,
    flag_reason    text        NOT NULL DEFAULT '',
    flagged_at     timestamptz,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (pool_id, contributor_id)
);

-- An assignment leases one slot of a unit to one contributor. UNIQUE
-- (unit_id, contributor_id): one person never gets the same unit twice,
-- not even after an assignment expired. pool_id has no foreign key on
-- purpose: checking one would share-lock the pool's row on every take, a
-- hot row for a hot pool (the unit's pool is checked already).
CREATE TABLE docket_assignments (
    id             uuid        PRIMARY KEY,
    unit_id        uuid        NOT NULL REFERENCES docket_units (id),
    pool_id        uuid        NOT NULL,
    contributor_id uuid        NOT NULL REFERENCES docket_contributors (id),
    state          text        NOT NULL CHECK (state IN ('ACTIVE', 'SUBMITTED', 'EXPIRED', 'RELEASED')),
    started_at     timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    heartbeat_at   timestamptz NOT NULL,
    finished_at    timestamptz,
    UNIQUE (unit_id, contributor_id)
);
-- The reaper's scan: ACTIVE assignments by expiry.
CREATE INDEX docket_assignments_active_expiry ON docket_assignments (expires_at) WHERE state = 'ACTIVE';
-- A contributor's units: what a take must skip (the anti-join of every pick).
CREATE INDEX docket_assignments_contributor ON docket_assignments (contributor_id, unit_id);

-- A judgment: one per assignment. trust is the contributor's trust in the
-- pool at submission; tainted judgments are excluded from aggregation;
-- golden marks an answer to a test question.
CREATE TABLE docket_judgments (
    id             uuid        PRIMARY KEY,
    assignment_id  uuid        NOT NULL UNIQUE REFERENCES docket_assignments (id),
    unit_id        uuid        NOT NULL,
    pool_id        uuid        NOT NULL,
    contributor_id uuid        NOT NULL,
    data           jsonb       NOT NULL,
    trust          double precision,
    golden         boolean     NOT NULL DEFAULT false,
    tainted        boolean     NOT NULL DEFAULT false,
    started_at     timestamptz NOT NULL,
    submitted_at   timestamptz NOT NULL
);
CREATE INDEX docket_judgments_unit ON docket_judgments (unit_id, id);
CREATE INDEX docket_judgments_pool ON docket_judgments (pool_id, id);
CREATE INDEX docket_judgments_pool_contributor ON docket_judgments (pool_id, contributor_id);
