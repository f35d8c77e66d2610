-- Durable event consumers: the inbox of handled event ids (a row commits
-- with the consumer's effect, so a redelivered event is skipped) and the
-- events a consumer gave up on.
CREATE TABLE docket_inbox (
    consumer   text        NOT NULL,
    event_id   text        NOT NULL,
    handled_at timestamptz NOT NULL,
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX docket_inbox_handled_at ON docket_inbox (handled_at);

CREATE TABLE docket_dead_letters (
    consumer           text        NOT NULL,
    event_id           text        NOT NULL,
    event_type         text        NOT NULL,
    envelope           json        NOT NULL,
    deliveries         integer     NOT NULL,
    last_error         text        NOT NULL,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    retry_requested_at timestamptz,
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX docket_dead_letters_retry ON docket_dead_letters (consumer, retry_requested_at)
    WHERE retry_requested_at IS NOT NULL;
