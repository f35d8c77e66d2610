ALTER TABLE docket_api_keys DROP COLUMN queues;
