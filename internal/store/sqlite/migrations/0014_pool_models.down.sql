DROP TABLE IF EXISTS docket_pool_models;
