-- Webhooks: subscriptions, and one delivery row per (subscription, event).
-- The same schema as on PostgreSQL (see its 0005_webhooks.up.sql): times
-- are unix microseconds, uuids and JSON are TEXT.
--
-- Fan-out reads the outbox by a mark, not by a cursor: webhooks_at is NULL
-- until the webhook dispatcher has inserted the row's deliveries, which it
-- sets in the same transaction. (SQLite commits outbox rows in id order, but
-- the mark keeps both backends alike.)
ALTER TABLE docket_outbox ADD COLUMN webhooks_at INTEGER;
-- Rows written before webhooks existed had no subscriber.
UPDATE docket_outbox SET webhooks_at = created_at;
CREATE INDEX docket_outbox_webhooks_pending ON docket_outbox (id) WHERE webhooks_at IS NULL;

CREATE TABLE docket_webhooks (
    id          TEXT    NOT NULL PRIMARY KEY,
    url         TEXT    NOT NULL,
    event_types TEXT    NOT NULL, -- JSON array of event types, or ["*"]
    secret      TEXT    NOT NULL, -- HMAC key: kept as given, needed to sign
    created_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE docket_webhook_deliveries (
    id               TEXT    NOT NULL PRIMARY KEY,
    webhook_id       TEXT    NOT NULL REFERENCES docket_webhooks (id) ON DELETE CASCADE,
    event_id         TEXT    NOT NULL,
    event_type       TEXT    NOT NULL,
    outbox_id        INTEGER NOT NULL,
    event_index      INTEGER NOT NULL,
    payload          TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('PENDING', 'DELIVERED', 'DEAD')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_status_code INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT    NOT NULL DEFAULT '',
    next_attempt_at  INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    last_attempt_at  INTEGER,
    finished_at      INTEGER,
    UNIQUE (webhook_id, event_id)
) STRICT;
CREATE INDEX docket_webhook_deliveries_order ON docket_webhook_deliveries (webhook_id, outbox_id, event_index);
CREATE INDEX docket_webhook_deliveries_due ON docket_webhook_deliveries (next_attempt_at) WHERE state = 'PENDING';
CREATE INDEX docket_webhook_deliveries_finished ON docket_webhook_deliveries (finished_at) WHERE finished_at IS NOT NULL;
