DROP TABLE docket_steps;
DROP TABLE docket_runs;
DROP TABLE docket_workflow_versions;
DROP TABLE docket_workflows;
