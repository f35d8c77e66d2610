-- An outbox row holds the events of a whole batch of state changes: a JSON
-- document of about 130 bytes per job (600 kB for 5,000 inserted jobs),
-- which PostgreSQL compresses as it moves it out of line. lz4 does that
-- about four times faster than the default pglz, for a little more space;
-- compressing with pglz was the dearest part of writing an event
-- (docs/benchmarks.md). A server built without lz4 keeps pglz.
DO $$
BEGIN
    ALTER TABLE docket_outbox ALTER COLUMN data SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'lz4 is not available in this server: outbox events stay compressed with pglz';
END
$$;
