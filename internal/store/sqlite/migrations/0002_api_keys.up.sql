CREATE TABLE docket_api_keys (
    id          TEXT    NOT NULL PRIMARY KEY,
    name        TEXT    NOT NULL,
    role        TEXT    NOT NULL,
    prefix      TEXT    NOT NULL,
    secret_hash TEXT    NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
) STRICT;
