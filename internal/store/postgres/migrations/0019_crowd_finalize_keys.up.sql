-- The finalizing judgment, cheaper for PostgreSQL without changing what
-- it guarantees (docs/benchmarks.md, "Third round: the judgment").
--
-- A row updated twice in one transaction has its foreign keys checked
-- again on the second update, even when the key did not change: the
-- judgment statement moves its unit and a counter row of its pool, and
-- the finalization that follows in the same transaction moves them again,
-- so every finalization looked its pool up twice and locked its row FOR
-- KEY SHARE twice — the one row of a hot pool, locked by every
-- finalization at once (a multixact per new locker). As 0018 did for the
-- assignments and judgments: a unit is inserted only by the transaction
-- that holds its pool's row (UnitInsertMany: SELECT … FOR SHARE), the
-- counter rows only with their pool, and pools are never deleted.
ALTER TABLE docket_units DROP CONSTRAINT docket_units_pool_id_fkey;
ALTER TABLE docket_pool_counters DROP CONSTRAINT docket_pool_counters_pool_id_fkey;
