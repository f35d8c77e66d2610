-- Quality control (internal/quality, docs/quality.md): the rest of what a
-- pool knows of a contributor, the history of their trust, which
-- assignments were test questions, and the audit of changed results.
-- Trust, the test counts, the flag and the judgments' trust snapshot and
-- taint are in 0010 already; a pool's quality settings are its settings
-- (docket_pools.settings), as its other task defaults are.

-- The rest of a contributor's quality state in a pool. trust stays NULL
-- until the first test question (quality.Trust.Snapshot). flag_check is
-- what flagged them (quality.FlagCheck), '' when not flagged; taken and
-- tests_taken are the scheduling's counts (quality.Counts), too_fast the
-- failed too-fast checks; agreed and judged the agreement with finalized
-- results (quality.Settings.AgreementWeight).
ALTER TABLE docket_pool_contributors
    ADD COLUMN flag_check  text        NOT NULL DEFAULT '',
    ADD COLUMN forgiven_at timestamptz,
    ADD COLUMN taken       integer     NOT NULL DEFAULT 0 CHECK (taken >= 0),
    ADD COLUMN tests_taken integer     NOT NULL DEFAULT 0 CHECK (tests_taken >= 0),
    ADD COLUMN too_fast    integer     NOT NULL DEFAULT 0 CHECK (too_fast >= 0),
    ADD COLUMN agreed      integer     NOT NULL DEFAULT 0 CHECK (agreed >= 0),
    ADD COLUMN judged      integer     NOT NULL DEFAULT 0 CHECK (judged >= 0);

-- Each change of a contributor's trust in a pool, numbered from 1 per
-- contributor and pool; the last 100 are kept (quality.MaxTrustHistory),
-- the append deletes older ones. Appends hold the contributor's quality
-- state row, so seq has no race.
CREATE TABLE docket_trust_history (
    pool_id        uuid             NOT NULL,
    contributor_id uuid             NOT NULL,
    seq            bigint           NOT NULL CHECK (seq >= 1),
    at             timestamptz      NOT NULL,
    tests_correct  integer          NOT NULL,
    tests_answered integer          NOT NULL,
    value          double precision NOT NULL,
    reason         text             NOT NULL,
    PRIMARY KEY (pool_id, contributor_id, seq),
    FOREIGN KEY (pool_id, contributor_id) REFERENCES docket_pool_contributors (pool_id, contributor_id) ON DELETE CASCADE
);

-- golden: the assignment is a test question. A contributor's test
-- questions in a pool are counted through the partial index. Until the
-- take writes the column itself, a trigger copies it from the unit.
ALTER TABLE docket_assignments ADD COLUMN golden boolean NOT NULL DEFAULT false;
UPDATE docket_assignments a SET golden = true FROM docket_units u WHERE u.id = a.unit_id AND u.golden;
CREATE INDEX docket_assignments_golden ON docket_assignments (pool_id, contributor_id) WHERE golden;

CREATE FUNCTION docket_assignments_golden() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT NEW.golden THEN
        NEW.golden := coalesce((SELECT u.golden FROM docket_units u WHERE u.id = NEW.unit_id), false);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER docket_assignments_golden BEFORE INSERT ON docket_assignments
    FOR EACH ROW EXECUTE FUNCTION docket_assignments_golden();

-- Tainted judgments of one contributor in a pool: the taint and un-taint
-- statements find them through docket_judgments_pool_contributor (0010).

-- The audit of a finalized unit's result changed by a repair
-- (quality.Audit): old and new result and confidence, the action
-- (recompute, reopen), the cause (the contributor, the check, flag or
-- un-flag, the reason) and why in words.
CREATE TABLE docket_unit_audits (
    id                   uuid             PRIMARY KEY,
    unit_id              uuid             NOT NULL REFERENCES docket_units (id),
    pool_id              uuid             NOT NULL,
    old_result           jsonb,
    new_result           jsonb,
    old_confidence       double precision,
    new_confidence       double precision,
    action               text             NOT NULL,
    cause_contributor_id uuid             NOT NULL,
    cause_check          text             NOT NULL,
    cause_untaint        boolean          NOT NULL,
    cause_reason         text             NOT NULL,
    why                  text             NOT NULL,
    at                   timestamptz      NOT NULL
);
CREATE INDEX docket_unit_audits_unit ON docket_unit_audits (unit_id, id);

-- The random pick of a test question (UnitPickGolden, and the golden take
-- with the random strategy) walks a pool's JUDGABLE golden units by random
-- key from a random point.
CREATE INDEX docket_units_golden_pick ON docket_units (pool_id, pick_key) WHERE golden AND state = 'JUDGABLE';
