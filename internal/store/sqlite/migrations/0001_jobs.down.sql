DROP TABLE IF EXISTS docket_leader;
DROP TABLE IF EXISTS docket_nodes;
DROP TABLE IF EXISTS docket_queues;
DROP TABLE IF EXISTS docket_outbox;
DROP TABLE IF EXISTS docket_job_attempts;
DROP TABLE IF EXISTS docket_jobs;
