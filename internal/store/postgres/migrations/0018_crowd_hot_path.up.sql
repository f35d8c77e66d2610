-- The hot path of human work (a take and a judgment), cheaper for
-- PostgreSQL without changing what it guarantees (docs/benchmarks.md,
-- "Where the time goes per judgment").
--
-- 1. The take writes the assignment's golden column itself (0013's
-- trigger ran a PL/pgSQL function and a unit read per take).
DROP TRIGGER docket_assignments_golden ON docket_assignments;
DROP FUNCTION docket_assignments_golden();

-- 2. Foreign keys the statements that write these rows check already,
-- as docket_assignments.pool_id never had one: each cost a lookup and a
-- FOR KEY SHARE lock of the parent row (a WAL record) per row written.
-- An assignment is inserted only by the take, in the statement that
-- updates its unit and reads its contributor (active, with the pool's
-- skills); a judgment only by the statement that marks its assignment
-- SUBMITTED. Units, contributors and assignments are never deleted.
ALTER TABLE docket_assignments DROP CONSTRAINT docket_assignments_unit_id_fkey;
ALTER TABLE docket_assignments DROP CONSTRAINT docket_assignments_contributor_id_fkey;
ALTER TABLE docket_judgments DROP CONSTRAINT docket_judgments_assignment_id_fkey;
