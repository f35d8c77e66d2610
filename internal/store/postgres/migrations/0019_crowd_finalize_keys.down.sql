ALTER TABLE docket_pool_counters ADD CONSTRAINT docket_pool_counters_pool_id_fkey
    FOREIGN KEY (pool_id) REFERENCES docket_pools (id) ON DELETE CASCADE;
ALTER TABLE docket_units ADD CONSTRAINT docket_units_pool_id_fkey
    FOREIGN KEY (pool_id) REFERENCES docket_pools (id);
