-- An outbox row holds the events of a whole batch of state changes: a JSON
-- document of about 130 bytes per job (600 kB for 5,000 inserted jobs),
-- which PostgreSQL compresses as it moves it out of line. lz4 does that
-- about four times faster than the default pglz, for a little more space;
-- compressing with pglz was the dearest part of writing an event
-- (docs/benchmarks.md). Column compression exists from PostgreSQL 14 (the
-- statement is run by EXECUTE so that older servers never parse it), and a
-- server built without lz4 keeps pglz.
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 140000 THEN
        EXECUTE 'ALTER TABLE docket_outbox ALTER COLUMN data SET COMPRESSION lz4';
    END IF;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'lz4 is not available in this server: outbox events stay compressed with pglz';
END
$$;
