-- A take's update of its unit (slots_taken + 1) could not be HOT:
-- slots_taken was in the predicate of the take's two partial indexes, so
-- every take wrote a new unit version with entries in the primary key,
-- docket_units_pool_state_id, docket_units_run and both open indexes,
-- and left a dead entry in each open index for the takes behind it to
-- walk past. The indexes now name has_slot, a stored column PostgreSQL
-- computes from the two counts: it changes only when the unit's last slot
-- is taken or a slot comes back, and an update that leaves every indexed
-- column as it was is HOT. So only the take that fills a unit moves it
-- out of the open indexes; the others stay in place (docs/benchmarks.md,
-- "Fifth round: the HOT take").
--
-- Adding a stored column rewrites docket_units under an exclusive lock.
ALTER TABLE docket_units
    ADD COLUMN has_slot boolean GENERATED ALWAYS AS (slots_taken < judgments_per_unit) STORED;
DROP INDEX docket_units_open;
DROP INDEX docket_units_open_pick;
CREATE INDEX docket_units_open ON docket_units (pool_id, id)
    WHERE state = 'JUDGABLE' AND NOT golden AND has_slot;
CREATE INDEX docket_units_open_pick ON docket_units (pool_id, pick_key)
    WHERE state = 'JUDGABLE' AND NOT golden AND has_slot;
