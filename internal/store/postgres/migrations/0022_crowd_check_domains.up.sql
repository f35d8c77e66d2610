-- The single-column CHECK constraints of the tables a crowd judgment
-- writes become domains. PostgreSQL 15 rebuilds every CHECK of a table
-- (reads its stored tree, plans it, compiles it) at each execution of a
-- statement that writes the table, whatever columns the statement sets:
-- docket_units had six, paid by every take, judgment and finalization;
-- docket_assignments one; docket_pool_contributors six, paid by each
-- quality-state update. A domain's check runs only where a statement
-- assigns the column, from the type cache (docs/benchmarks.md, "Seventh
-- round: PostgreSQL's executor per judgment"). The database refuses the
-- same values as before (TestCheckDomains); the two checks that name two
-- columns of docket_units stay table checks.
--
-- Changing a column's type to a domain rewrites the table and rebuilds
-- its indexes under an exclusive lock. has_slot is computed from two of
-- the columns, and PostgreSQL does not change the type of a column a
-- generated column reads: it is dropped and added again (with the two
-- indexes that name it) in the same ALTER TABLE, one rewrite.
CREATE DOMAIN docket_unit_state AS text
    CHECK (VALUE IN ('NEW', 'JUDGABLE', 'PAUSED', 'FINALIZED', 'CANCELED'));
CREATE DOMAIN docket_assignment_state AS text
    CHECK (VALUE IN ('ACTIVE', 'SUBMITTED', 'EXPIRED', 'RELEASED'));
-- A count or an index: zero or more.
CREATE DOMAIN docket_count AS integer CHECK (VALUE >= 0);
-- judgments_per_unit: one or more.
CREATE DOMAIN docket_positive AS integer CHECK (VALUE >= 1);
CREATE DOMAIN docket_trust AS double precision CHECK (VALUE >= 0 AND VALUE <= 1);

DROP INDEX docket_units_open;
DROP INDEX docket_units_open_pick;
ALTER TABLE docket_units
    DROP CONSTRAINT docket_units_state_check,
    DROP CONSTRAINT docket_units_step_index_check,
    DROP CONSTRAINT docket_units_slots_taken_check,
    DROP CONSTRAINT docket_units_judgments_per_unit_check,
    DROP COLUMN has_slot,
    ALTER COLUMN state TYPE docket_unit_state,
    ALTER COLUMN step_index TYPE docket_count,
    ALTER COLUMN slots_taken TYPE docket_count,
    ALTER COLUMN judgments_per_unit TYPE docket_positive,
    ADD COLUMN has_slot boolean GENERATED ALWAYS AS (slots_taken < judgments_per_unit) STORED;
CREATE INDEX docket_units_open ON docket_units (pool_id, id)
    WHERE state = 'JUDGABLE' AND NOT golden AND has_slot;
CREATE INDEX docket_units_open_pick ON docket_units (pool_id, pick_key)
    WHERE state = 'JUDGABLE' AND NOT golden AND has_slot;

ALTER TABLE docket_assignments
    DROP CONSTRAINT docket_assignments_state_check,
    ALTER COLUMN state TYPE docket_assignment_state;

ALTER TABLE docket_pool_contributors
    DROP CONSTRAINT docket_pool_contributors_trust_check,
    DROP CONSTRAINT docket_pool_contributors_taken_check,
    DROP CONSTRAINT docket_pool_contributors_tests_taken_check,
    DROP CONSTRAINT docket_pool_contributors_too_fast_check,
    DROP CONSTRAINT docket_pool_contributors_agreed_check,
    DROP CONSTRAINT docket_pool_contributors_judged_check,
    ALTER COLUMN trust TYPE docket_trust,
    ALTER COLUMN taken TYPE docket_count,
    ALTER COLUMN tests_taken TYPE docket_count,
    ALTER COLUMN too_fast TYPE docket_count,
    ALTER COLUMN agreed TYPE docket_count,
    ALTER COLUMN judged TYPE docket_count;

-- ALTER COLUMN TYPE drops the retyped columns' statistics; the take's and
-- the judgment's plans read them, and autovacuum may not analyze a large,
-- settled table for a long time. Only a table that holds rows: an ANALYZE
-- of an empty one (a fresh database) records it as empty, and plans cached
-- then read it whole as it grows, where a table never analyzed is planned
-- as ten pages (AnalyzeGrown analyzes it once it has grown).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM docket_units) THEN ANALYZE docket_units; END IF;
    IF EXISTS (SELECT 1 FROM docket_assignments) THEN ANALYZE docket_assignments; END IF;
    IF EXISTS (SELECT 1 FROM docket_pool_contributors) THEN ANALYZE docket_pool_contributors; END IF;
END
$$;
