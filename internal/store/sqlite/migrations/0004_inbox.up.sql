-- Durable event consumers: the inbox of handled event ids (a row commits
-- with the consumer's effect, so a redelivered event is skipped) and the
-- events a consumer gave up on. Times are unix microseconds.
CREATE TABLE docket_inbox (
    consumer   TEXT    NOT NULL,
    event_id   TEXT    NOT NULL,
    handled_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, event_id)
) STRICT;
CREATE INDEX docket_inbox_handled_at ON docket_inbox (handled_at);

CREATE TABLE docket_dead_letters (
    consumer           TEXT    NOT NULL,
    event_id           TEXT    NOT NULL,
    event_type         TEXT    NOT NULL,
    envelope           TEXT    NOT NULL,
    deliveries         INTEGER NOT NULL,
    last_error         TEXT    NOT NULL,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    retry_requested_at INTEGER,
    PRIMARY KEY (consumer, event_id)
) STRICT;
CREATE INDEX docket_dead_letters_retry ON docket_dead_letters (consumer, retry_requested_at)
    WHERE retry_requested_at IS NOT NULL;
