CREATE INDEX docket_assignments_contributor ON docket_assignments (contributor_id, unit_id);
