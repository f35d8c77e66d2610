-- The requester's explanation of a golden unit's known answer, shown to
-- a contributor after they answered the test question (docs/quality.md,
-- "Feedback after a test question"). Plain text; NULL for none and for
-- every regular unit. A nullable column without a default is a catalog
-- change only; the CHECK is NOT VALID so that adding it does not scan the
-- units (every existing row has NULL) — new and updated rows are checked.
ALTER TABLE docket_units ADD COLUMN feedback text;
ALTER TABLE docket_units ADD CONSTRAINT docket_units_feedback_golden CHECK (feedback IS NULL OR golden) NOT VALID;
