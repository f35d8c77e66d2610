-- The worker-quality model of each categorical field of a pool whose
-- method learns one (Dawid-Skene and the others of internal/aggregate):
-- the JSON of an aggregate.Model, re-estimated from the pool's clean
-- judgments by the maintenance leader (the pool-estimator service) and
-- read by every node when a unit is finalized. judgments is how many
-- judgments the pool had counted when it was estimated: an estimate is
-- redone only when that number moved.
CREATE TABLE docket_pool_models (
    pool_id      uuid        NOT NULL REFERENCES docket_pools (id) ON DELETE CASCADE,
    field        text        NOT NULL,
    model        jsonb       NOT NULL,
    judgments    integer     NOT NULL CHECK (judgments >= 0),
    estimated_at timestamptz NOT NULL,
    PRIMARY KEY (pool_id, field)
);
