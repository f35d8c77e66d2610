DROP INDEX IF EXISTS docket_outbox_publish_seq;
ALTER TABLE docket_outbox DROP COLUMN publish_seq;
