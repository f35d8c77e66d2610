DROP TABLE IF EXISTS docket_webhook_deliveries;
DROP TABLE IF EXISTS docket_webhooks;
DROP INDEX IF EXISTS docket_outbox_webhooks_pending;
ALTER TABLE docket_outbox DROP COLUMN IF EXISTS webhooks_at;
