ALTER TABLE docket_judgments ADD CONSTRAINT docket_judgments_assignment_id_fkey
    FOREIGN KEY (assignment_id) REFERENCES docket_assignments (id);
ALTER TABLE docket_assignments ADD CONSTRAINT docket_assignments_contributor_id_fkey
    FOREIGN KEY (contributor_id) REFERENCES docket_contributors (id);
ALTER TABLE docket_assignments ADD CONSTRAINT docket_assignments_unit_id_fkey
    FOREIGN KEY (unit_id) REFERENCES docket_units (id);

CREATE FUNCTION docket_assignments_golden() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT NEW.golden THEN
        NEW.golden := coalesce((SELECT u.golden FROM docket_units u WHERE u.id = NEW.unit_id), false);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER docket_assignments_golden BEFORE INSERT ON docket_assignments
    FOR EACH ROW EXECUTE FUNCTION docket_assignments_golden();
