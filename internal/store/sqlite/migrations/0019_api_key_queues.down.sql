-- Without the column a key's NULL queues means any queue: revoke the scoped
-- keys first, so they fail closed instead of leasing every queue
-- (revoked_at is unix microseconds).
UPDATE docket_api_keys SET revoked_at = CAST(strftime('%s', 'now') AS INTEGER) * 1000000
    WHERE queues IS NOT NULL AND revoked_at IS NULL;
ALTER TABLE docket_api_keys DROP COLUMN queues;
