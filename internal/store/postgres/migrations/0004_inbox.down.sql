DROP TABLE IF EXISTS docket_dead_letters;
DROP TABLE IF EXISTS docket_inbox;
