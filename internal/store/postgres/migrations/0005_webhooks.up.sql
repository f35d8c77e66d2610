-- Webhooks: subscriptions, and one delivery row per (subscription, event).
--
-- Fan-out reads the outbox by a mark, not by a cursor: outbox ids are taken
-- from a sequence before commit, so a row can commit after rows with higher
-- ids; a cursor ("every id up to N is done") would skip it. webhooks_at is
-- NULL until the webhook dispatcher has inserted the row's deliveries, which
-- it sets in the same transaction. The partial index holds only rows not
-- fanned out yet (one entry per outbox row, i.e. per statement, not per job).
ALTER TABLE docket_outbox ADD COLUMN webhooks_at timestamptz;
-- Rows written before webhooks existed had no subscriber.
UPDATE docket_outbox SET webhooks_at = created_at;
CREATE INDEX docket_outbox_webhooks_pending ON docket_outbox (id) WHERE webhooks_at IS NULL;

CREATE TABLE docket_webhooks (
    id          uuid PRIMARY KEY,
    url         text        NOT NULL,
    event_types jsonb       NOT NULL, -- array of event types, or ["*"]
    secret      text        NOT NULL, -- HMAC key: kept as given, needed to sign
    created_at  timestamptz NOT NULL
);

-- state: PENDING (due at next_attempt_at; a claimed one has it moved past
-- the attempt's deadline), DELIVERED or DEAD. event_id is
-- "<outbox_id>-<event_index>"; the pair orders a webhook's events.
CREATE TABLE docket_webhook_deliveries (
    id               uuid PRIMARY KEY,
    webhook_id       uuid        NOT NULL REFERENCES docket_webhooks (id) ON DELETE CASCADE,
    event_id         text        NOT NULL,
    event_type       text        NOT NULL,
    outbox_id        bigint      NOT NULL,
    event_index      integer     NOT NULL,
    payload          json        NOT NULL,
    state            text        NOT NULL CHECK (state IN ('PENDING', 'DELIVERED', 'DEAD')),
    attempts         integer     NOT NULL DEFAULT 0,
    last_status_code integer     NOT NULL DEFAULT 0,
    last_error       text        NOT NULL DEFAULT '',
    next_attempt_at  timestamptz NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    last_attempt_at  timestamptz,
    finished_at      timestamptz,
    UNIQUE (webhook_id, event_id)
);
CREATE INDEX docket_webhook_deliveries_order ON docket_webhook_deliveries (webhook_id, outbox_id, event_index);
CREATE INDEX docket_webhook_deliveries_due ON docket_webhook_deliveries (next_attempt_at) WHERE state = 'PENDING';
CREATE INDEX docket_webhook_deliveries_finished ON docket_webhook_deliveries (finished_at) WHERE finished_at IS NOT NULL;
