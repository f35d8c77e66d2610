-- Quality control (internal/quality, docs/quality.md): the rest of what a
-- pool knows of a contributor, the history of their trust, which
-- assignments were test questions, and the audit of changed results.
-- Trust, the test counts, the flag and the judgments' trust snapshot and
-- taint are in 0010 already; a pool's quality settings are its settings
-- (docket_pools.settings), as its other task defaults are.

-- The rest of a contributor's quality state in a pool (see the PostgreSQL
-- migration for each column).
ALTER TABLE docket_pool_contributors ADD COLUMN flag_check TEXT NOT NULL DEFAULT '';
ALTER TABLE docket_pool_contributors ADD COLUMN forgiven_at INTEGER;
ALTER TABLE docket_pool_contributors ADD COLUMN taken INTEGER NOT NULL DEFAULT 0 CHECK (taken >= 0);
ALTER TABLE docket_pool_contributors ADD COLUMN tests_taken INTEGER NOT NULL DEFAULT 0 CHECK (tests_taken >= 0);
ALTER TABLE docket_pool_contributors ADD COLUMN too_fast INTEGER NOT NULL DEFAULT 0 CHECK (too_fast >= 0);
ALTER TABLE docket_pool_contributors ADD COLUMN agreed INTEGER NOT NULL DEFAULT 0 CHECK (agreed >= 0);
ALTER TABLE docket_pool_contributors ADD COLUMN judged INTEGER NOT NULL DEFAULT 0 CHECK (judged >= 0);

-- Each change of a contributor's trust in a pool, numbered from 1; the
-- last 100 are kept (quality.MaxTrustHistory).
CREATE TABLE docket_trust_history (
    pool_id        TEXT    NOT NULL,
    contributor_id TEXT    NOT NULL,
    seq            INTEGER NOT NULL CHECK (seq >= 1),
    at             INTEGER NOT NULL,
    tests_correct  INTEGER NOT NULL,
    tests_answered INTEGER NOT NULL,
    value          REAL    NOT NULL,
    reason         TEXT    NOT NULL,
    PRIMARY KEY (pool_id, contributor_id, seq),
    FOREIGN KEY (pool_id, contributor_id) REFERENCES docket_pool_contributors (pool_id, contributor_id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;

-- golden: the assignment is a test question, counted through the partial
-- index. Until the take writes the column itself, a trigger copies it from
-- the unit.
ALTER TABLE docket_assignments ADD COLUMN golden INTEGER NOT NULL DEFAULT 0;
UPDATE docket_assignments SET golden = 1
    WHERE EXISTS (SELECT 1 FROM docket_units u WHERE u.id = docket_assignments.unit_id AND u.golden = 1);
CREATE INDEX docket_assignments_golden ON docket_assignments (pool_id, contributor_id) WHERE golden = 1;
CREATE TRIGGER docket_assignments_golden AFTER INSERT ON docket_assignments
    WHEN NEW.golden = 0 AND EXISTS (SELECT 1 FROM docket_units u WHERE u.id = NEW.unit_id AND u.golden = 1)
BEGIN
    UPDATE docket_assignments SET golden = 1 WHERE rowid = NEW.rowid;
END;

-- The audit of a finalized unit's result changed by a repair
-- (quality.Audit).
CREATE TABLE docket_unit_audits (
    id                   TEXT    NOT NULL PRIMARY KEY,
    unit_id              TEXT    NOT NULL REFERENCES docket_units (id),
    pool_id              TEXT    NOT NULL,
    old_result           TEXT,
    new_result           TEXT,
    old_confidence       REAL,
    new_confidence       REAL,
    action               TEXT    NOT NULL,
    cause_contributor_id TEXT    NOT NULL,
    cause_check          TEXT    NOT NULL,
    cause_untaint        INTEGER NOT NULL,
    cause_reason         TEXT    NOT NULL,
    why                  TEXT    NOT NULL,
    at                   INTEGER NOT NULL
) STRICT;
CREATE INDEX docket_unit_audits_unit ON docket_unit_audits (unit_id, id);

-- The random pick of a test question walks a pool's JUDGABLE golden units
-- by random key from a random point.
CREATE INDEX docket_units_golden_pick ON docket_units (pool_id, pick_key) WHERE golden = 1 AND state = 'JUDGABLE';
