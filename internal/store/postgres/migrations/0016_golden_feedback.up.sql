-- The requester's explanation of a golden unit's known answer, shown to
-- a contributor after they answered the test question (docs/quality.md,
-- "Feedback after a test question"). Plain text; NULL for none and for
-- every regular unit.
ALTER TABLE docket_units ADD COLUMN feedback text;
ALTER TABLE docket_units ADD CONSTRAINT docket_units_feedback_golden CHECK (feedback IS NULL OR golden);
