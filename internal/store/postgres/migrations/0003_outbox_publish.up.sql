-- The relay numbers rows as it publishes them: the event history (SSE) is
-- read in publish order, which ids do not give (an id is assigned before
-- its transaction commits, so rows can commit out of id order). Rows
-- published before this migration keep their id order.
ALTER TABLE docket_outbox ADD COLUMN publish_seq bigint;
UPDATE docket_outbox SET publish_seq = id WHERE published_at IS NOT NULL;
-- Unique: two relays overlapping at a change of leader cannot give two rows
-- one number (the second statement fails and is retried).
CREATE UNIQUE INDEX docket_outbox_publish_seq ON docket_outbox (publish_seq) WHERE publish_seq IS NOT NULL;
