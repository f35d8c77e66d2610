DROP INDEX docket_units_open;
DROP INDEX docket_units_open_pick;
ALTER TABLE docket_units DROP COLUMN has_slot;
CREATE INDEX docket_units_open ON docket_units (pool_id, id)
    WHERE state = 'JUDGABLE' AND NOT golden AND slots_taken < judgments_per_unit;
CREATE INDEX docket_units_open_pick ON docket_units (pool_id, pick_key)
    WHERE state = 'JUDGABLE' AND NOT golden AND slots_taken < judgments_per_unit;
