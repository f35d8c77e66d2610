ALTER TABLE docket_units DROP CONSTRAINT IF EXISTS docket_units_feedback_golden;
ALTER TABLE docket_units DROP COLUMN IF EXISTS feedback;
