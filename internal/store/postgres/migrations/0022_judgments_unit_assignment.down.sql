CREATE INDEX docket_judgments_unit ON docket_judgments (unit_id, id);
ALTER TABLE docket_judgments ADD CONSTRAINT docket_judgments_assignment_id_key UNIQUE (assignment_id);
DROP INDEX docket_judgments_unit_assignment;
