CREATE TABLE docket_api_keys (
    id          uuid PRIMARY KEY,
    name        text        NOT NULL,
    role        text        NOT NULL,
    prefix      text        NOT NULL,
    secret_hash text        NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);
