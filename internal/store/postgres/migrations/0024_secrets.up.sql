-- Secrets the processes of one installation share, made once by the first
-- that needs one: "lease" keys the tokens of remote workers' lease ids.
CREATE TABLE docket_secrets (
    name       text        PRIMARY KEY,
    secret     bytea       NOT NULL,
    created_at timestamptz NOT NULL
);
