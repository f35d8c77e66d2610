DROP INDEX docket_units_open;
DROP INDEX docket_units_open_pick;
ALTER TABLE docket_units
    DROP COLUMN has_slot,
    ALTER COLUMN state TYPE text,
    ALTER COLUMN step_index TYPE integer,
    ALTER COLUMN slots_taken TYPE integer,
    ALTER COLUMN judgments_per_unit TYPE integer,
    ADD CONSTRAINT docket_units_state_check CHECK (state IN ('NEW', 'JUDGABLE', 'PAUSED', 'FINALIZED', 'CANCELED')),
    ADD CONSTRAINT docket_units_step_index_check CHECK (step_index >= 0),
    ADD CONSTRAINT docket_units_slots_taken_check CHECK (slots_taken >= 0),
    ADD CONSTRAINT docket_units_judgments_per_unit_check CHECK (judgments_per_unit >= 1),
    ADD COLUMN has_slot boolean GENERATED ALWAYS AS (slots_taken < judgments_per_unit) STORED;
CREATE INDEX docket_units_open ON docket_units (pool_id, id)
    WHERE state = 'JUDGABLE' AND NOT golden AND has_slot;
CREATE INDEX docket_units_open_pick ON docket_units (pool_id, pick_key)
    WHERE state = 'JUDGABLE' AND NOT golden AND has_slot;

ALTER TABLE docket_assignments
    ALTER COLUMN state TYPE text,
    ADD CONSTRAINT docket_assignments_state_check CHECK (state IN ('ACTIVE', 'SUBMITTED', 'EXPIRED', 'RELEASED'));

ALTER TABLE docket_pool_contributors
    ALTER COLUMN trust TYPE double precision,
    ALTER COLUMN taken TYPE integer,
    ALTER COLUMN tests_taken TYPE integer,
    ALTER COLUMN too_fast TYPE integer,
    ALTER COLUMN agreed TYPE integer,
    ALTER COLUMN judged TYPE integer,
    ADD CONSTRAINT docket_pool_contributors_trust_check CHECK (trust >= 0 AND trust <= 1),
    ADD CONSTRAINT docket_pool_contributors_taken_check CHECK (taken >= 0),
    ADD CONSTRAINT docket_pool_contributors_tests_taken_check CHECK (tests_taken >= 0),
    ADD CONSTRAINT docket_pool_contributors_too_fast_check CHECK (too_fast >= 0),
    ADD CONSTRAINT docket_pool_contributors_agreed_check CHECK (agreed >= 0),
    ADD CONSTRAINT docket_pool_contributors_judged_check CHECK (judged >= 0);

-- ALTER COLUMN TYPE dropped the columns' statistics (see the up
-- migration): the tables that hold rows are analyzed again.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM docket_units) THEN ANALYZE docket_units; END IF;
    IF EXISTS (SELECT 1 FROM docket_assignments) THEN ANALYZE docket_assignments; END IF;
    IF EXISTS (SELECT 1 FROM docket_pool_contributors) THEN ANALYZE docket_pool_contributors; END IF;
END
$$;

DROP DOMAIN docket_unit_state;
DROP DOMAIN docket_assignment_state;
DROP DOMAIN docket_count;
DROP DOMAIN docket_positive;
DROP DOMAIN docket_trust;
