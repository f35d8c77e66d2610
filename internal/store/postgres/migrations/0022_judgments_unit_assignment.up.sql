-- A judgment wrote six index entries: the primary key, UNIQUE (assignment_id),
-- (unit_id, id), (pool_id, id) and (pool_id, contributor_id). Two of them
-- become one, UNIQUE (unit_id, assignment_id), one entry and one WAL record
-- less per judgment (docs/benchmarks.md, "Sixth round: what a judgment
-- writes"):
--
-- - it keeps "one judgment per assignment" checked by the database: an
--   assignment belongs to one unit for ever, and the only statement that
--   inserts a judgment copies unit_id from its assignment, so the pairs
--   (unit_id, assignment_id) are unique exactly when the assignment ids are;
-- - it serves what (unit_id, id) served: a unit's judgments (at most a few
--   dozen: its judgments_per_unit) are read through it and sorted by id;
-- - the one read by assignment (the idempotent resend of a judgment) knows
--   the assignment's unit and names it.
CREATE UNIQUE INDEX docket_judgments_unit_assignment ON docket_judgments (unit_id, assignment_id);
ALTER TABLE docket_judgments DROP CONSTRAINT docket_judgments_assignment_id_key;
DROP INDEX docket_judgments_unit;
