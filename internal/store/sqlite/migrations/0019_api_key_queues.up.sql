-- The queues a worker key may lease from, a JSON array of names; NULL: any
-- queue (see PostgreSQL's 0026_api_key_queues).
ALTER TABLE docket_api_keys ADD COLUMN queues TEXT;
