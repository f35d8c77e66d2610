ALTER TABLE docket_webhook_deliveries DROP COLUMN claimed_by;
