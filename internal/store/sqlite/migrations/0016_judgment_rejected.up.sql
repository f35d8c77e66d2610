-- A judgment tainted because a QA review rejected its unit (see
-- PostgreSQL's 0017_judgment_rejected): a forgiveness never lifts it.
ALTER TABLE docket_judgments ADD COLUMN rejected INTEGER NOT NULL DEFAULT 0 CHECK (rejected IN (0, 1));
