DROP INDEX docket_units_golden_pick;
DROP TABLE docket_unit_audits;
DROP TRIGGER docket_assignments_golden ON docket_assignments;
DROP FUNCTION docket_assignments_golden();
DROP INDEX docket_assignments_golden;
ALTER TABLE docket_assignments DROP COLUMN golden;
DROP TABLE docket_trust_history;
ALTER TABLE docket_pool_contributors
    DROP COLUMN flag_check,
    DROP COLUMN forgiven_at,
    DROP COLUMN taken,
    DROP COLUMN tests_taken,
    DROP COLUMN too_fast,
    DROP COLUMN agreed,
    DROP COLUMN judged;
