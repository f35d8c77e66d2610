ALTER TABLE docket_units DROP COLUMN feedback;
