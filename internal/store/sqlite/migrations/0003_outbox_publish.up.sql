-- The relay numbers rows as it publishes them: the event history (SSE) is
-- read in publish order, which ids do not give (an id is assigned before
-- its transaction commits). Rows published before this migration keep
-- their id order.
ALTER TABLE docket_outbox ADD COLUMN publish_seq INTEGER;
UPDATE docket_outbox SET publish_seq = id WHERE published_at IS NOT NULL;
CREATE UNIQUE INDEX docket_outbox_publish_seq ON docket_outbox (publish_seq) WHERE publish_seq IS NOT NULL;
