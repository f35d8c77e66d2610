DROP TABLE IF EXISTS docket_api_keys;
