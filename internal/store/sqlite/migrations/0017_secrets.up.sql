-- Secrets the processes of one installation share (see PostgreSQL's
-- 0024_secrets): "lease" keys the tokens of remote workers' lease ids.
CREATE TABLE docket_secrets (
    name       TEXT    NOT NULL PRIMARY KEY,
    secret     BLOB    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;
