-- The worker-quality model of each categorical field of a pool (see the
-- PostgreSQL migration 0015_pool_models): an aggregate.Model as JSON text.
CREATE TABLE docket_pool_models (
    pool_id      TEXT    NOT NULL REFERENCES docket_pools (id) ON DELETE CASCADE,
    field        TEXT    NOT NULL,
    model        TEXT    NOT NULL,
    judgments    INTEGER NOT NULL CHECK (judgments >= 0),
    estimated_at INTEGER NOT NULL,
    PRIMARY KEY (pool_id, field)
) STRICT, WITHOUT ROWID;
