ALTER TABLE docket_judgments DROP COLUMN rejected;
