-- The node whose claim of a delivery is being sent, until the attempt is
-- finished or released: a new holder of the webhooks leadership takes over
-- the claims of the previous one instead of waiting for their leases.
ALTER TABLE docket_webhook_deliveries ADD COLUMN claimed_by text;
