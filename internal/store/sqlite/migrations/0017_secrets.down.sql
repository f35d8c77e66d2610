DROP TABLE docket_secrets;
