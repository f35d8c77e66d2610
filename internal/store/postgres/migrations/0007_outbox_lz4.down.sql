DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 140000 THEN
        EXECUTE 'ALTER TABLE docket_outbox ALTER COLUMN data SET COMPRESSION default';
    END IF;
END
$$;
