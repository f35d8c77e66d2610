-- Human work: the same schema as on PostgreSQL (see its 0010_crowd.up.sql):
-- times are unix microseconds, uuids, JSON and lists (JSON arrays) are
-- TEXT, booleans 0/1. The one writer connection serialises every write, so
-- a pool keeps one counter row (shard 0) and takes need no row locks.
CREATE TABLE docket_tasks (
    name           TEXT    NOT NULL PRIMARY KEY,
    latest_version INTEGER NOT NULL,
    latest_hash    TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
) STRICT;

CREATE TABLE docket_task_versions (
    name       TEXT    NOT NULL REFERENCES docket_tasks (name),
    version    INTEGER NOT NULL CHECK (version >= 1),
    hash       TEXT    NOT NULL,
    definition TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (name, version)
) STRICT;

CREATE TABLE docket_pools (
    id                 TEXT    NOT NULL PRIMARY KEY,
    workflow           TEXT    NOT NULL,
    workflow_version   INTEGER NOT NULL,
    step               TEXT    NOT NULL,
    task               TEXT    NOT NULL,
    task_version       INTEGER NOT NULL,
    status             TEXT    NOT NULL CHECK (status IN ('OPEN', 'PAUSED', 'CLOSED', 'COMPLETED')),
    priority           INTEGER NOT NULL DEFAULT 0,
    skills             TEXT    NOT NULL DEFAULT '[]',
    channels           TEXT    NOT NULL DEFAULT '[]',
    judgments_per_unit INTEGER NOT NULL CHECK (judgments_per_unit >= 1),
    assignment_seconds INTEGER NOT NULL CHECK (assignment_seconds >= 1),
    settings           TEXT    NOT NULL DEFAULT '{}',
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    UNIQUE (workflow, workflow_version, step),
    FOREIGN KEY (workflow, workflow_version) REFERENCES docket_workflow_versions (name, version),
    FOREIGN KEY (task, task_version) REFERENCES docket_task_versions (name, version)
) STRICT;
CREATE INDEX docket_pools_status_id ON docket_pools (status, id);

CREATE TABLE docket_pool_counters (
    pool_id            TEXT    NOT NULL REFERENCES docket_pools (id) ON DELETE CASCADE,
    shard              INTEGER NOT NULL,
    units_new          INTEGER NOT NULL DEFAULT 0,
    units_judgable     INTEGER NOT NULL DEFAULT 0,
    units_paused       INTEGER NOT NULL DEFAULT 0,
    units_finalized    INTEGER NOT NULL DEFAULT 0,
    units_canceled     INTEGER NOT NULL DEFAULT 0,
    units_golden       INTEGER NOT NULL DEFAULT 0,
    judgments          INTEGER NOT NULL DEFAULT 0,
    active_assignments INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (pool_id, shard)
) STRICT, WITHOUT ROWID;

CREATE TABLE docket_units (
    id                 TEXT    NOT NULL PRIMARY KEY,
    pool_id            TEXT    NOT NULL REFERENCES docket_pools (id),
    run_id             TEXT,
    step_index         INTEGER CHECK (step_index >= 0),
    parent_unit_id     TEXT,
    input              TEXT    NOT NULL,
    state              TEXT    NOT NULL CHECK (state IN ('NEW', 'JUDGABLE', 'PAUSED', 'FINALIZED', 'CANCELED')),
    golden             INTEGER NOT NULL DEFAULT 0,
    answer             TEXT,
    pick_key           INTEGER NOT NULL,
    slots_taken        INTEGER NOT NULL DEFAULT 0 CHECK (slots_taken >= 0),
    judgments_per_unit INTEGER NOT NULL CHECK (judgments_per_unit >= 1),
    judgment_count     INTEGER NOT NULL DEFAULT 0,
    result             TEXT,
    confidence         REAL,
    finalized_at       INTEGER,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    CHECK (golden = (answer IS NOT NULL))
) STRICT;
CREATE INDEX docket_units_open ON docket_units (pool_id, id)
    WHERE state = 'JUDGABLE' AND golden = 0 AND slots_taken < judgments_per_unit;
CREATE INDEX docket_units_open_pick ON docket_units (pool_id, pick_key)
    WHERE state = 'JUDGABLE' AND golden = 0 AND slots_taken < judgments_per_unit;
CREATE INDEX docket_units_golden ON docket_units (pool_id, id) WHERE golden = 1 AND state = 'JUDGABLE';
CREATE INDEX docket_units_pool_state_id ON docket_units (pool_id, state, id);
CREATE INDEX docket_units_run ON docket_units (run_id) WHERE run_id IS NOT NULL;

CREATE TABLE docket_contributors (
    id          TEXT    NOT NULL PRIMARY KEY,
    external_id TEXT    NOT NULL UNIQUE,
    name        TEXT    NOT NULL DEFAULT '',
    skills      TEXT    NOT NULL DEFAULT '[]',
    channels    TEXT    NOT NULL DEFAULT '[]',
    state       TEXT    NOT NULL CHECK (state IN ('active', 'flagged', 'banned')),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;

-- A contributor API key is bound to one contributor. SQLite cannot drop a
-- column with a foreign key, so the store checks that the contributor
-- exists when it inserts a key.
ALTER TABLE docket_api_keys ADD COLUMN contributor_id TEXT;
CREATE INDEX docket_api_keys_contributor ON docket_api_keys (contributor_id) WHERE contributor_id IS NOT NULL;

CREATE TABLE docket_pool_contributors (
    pool_id        TEXT    NOT NULL REFERENCES docket_pools (id) ON DELETE CASCADE,
    contributor_id TEXT    NOT NULL REFERENCES docket_contributors (id),
    trust          REAL    CHECK (trust >= 0 AND trust <= 1),
    tests_answered INTEGER NOT NULL DEFAULT 0,
    tests_correct  INTEGER NOT NULL DEFAULT 0,
    flagged        INTEGER NOT NULL DEFAULT 0,
    flag_reason    TEXT    NOT NULL DEFAULT '',
    flagged_at     INTEGER,
    updated_at     INTEGER NOT NULL,
    PRIMARY KEY (pool_id, contributor_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE docket_assignments (
    id             TEXT    NOT NULL PRIMARY KEY,
    unit_id        TEXT    NOT NULL REFERENCES docket_units (id),
    pool_id        TEXT    NOT NULL,
    contributor_id TEXT    NOT NULL REFERENCES docket_contributors (id),
    state          TEXT    NOT NULL CHECK (state IN ('ACTIVE', 'SUBMITTED', 'EXPIRED', 'RELEASED')),
    started_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    heartbeat_at   INTEGER NOT NULL,
    finished_at    INTEGER,
    UNIQUE (unit_id, contributor_id)
) STRICT;
CREATE INDEX docket_assignments_active_expiry ON docket_assignments (expires_at) WHERE state = 'ACTIVE';
CREATE INDEX docket_assignments_contributor ON docket_assignments (contributor_id, unit_id);

CREATE TABLE docket_judgments (
    id             TEXT    NOT NULL PRIMARY KEY,
    assignment_id  TEXT    NOT NULL UNIQUE REFERENCES docket_assignments (id),
    unit_id        TEXT    NOT NULL,
    pool_id        TEXT    NOT NULL,
    contributor_id TEXT    NOT NULL,
    data           TEXT    NOT NULL,
    trust          REAL,
    golden         INTEGER NOT NULL DEFAULT 0,
    tainted        INTEGER NOT NULL DEFAULT 0,
    started_at     INTEGER NOT NULL,
    submitted_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX docket_judgments_unit ON docket_judgments (unit_id, id);
CREATE INDEX docket_judgments_pool ON docket_judgments (pool_id, id);
CREATE INDEX docket_judgments_pool_contributor ON docket_judgments (pool_id, contributor_id);
