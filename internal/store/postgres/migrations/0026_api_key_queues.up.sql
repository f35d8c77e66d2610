-- The queues a worker key may lease from; NULL: any queue (every key made
-- before this column, and keys made without queues).
ALTER TABLE docket_api_keys ADD COLUMN queues text[];
