-- The explanation of a golden unit's known answer (see PostgreSQL's
-- 0016_golden_feedback): plain text, NULL for none and for regular units.
ALTER TABLE docket_units ADD COLUMN feedback TEXT CHECK (feedback IS NULL OR golden);
