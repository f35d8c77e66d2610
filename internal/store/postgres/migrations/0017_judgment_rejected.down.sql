ALTER TABLE docket_judgments DROP COLUMN IF EXISTS rejected;
