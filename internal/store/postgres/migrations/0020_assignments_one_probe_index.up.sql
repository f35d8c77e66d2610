-- Whether a contributor had a unit is asked one (unit, contributor) at a
-- time (the takes, the golden pick and finding work probe it per unit,
-- in subplans: OFFSET 0), which the UNIQUE (unit_id, contributor_id)
-- index answers. The second index on the same columns, (contributor_id,
-- unit_id), served the anti-joins those probes used to be; it cost an
-- index entry and a WAL record per assignment written: at every take,
-- and again at every non-HOT update of the assignment (SUBMITTED,
-- EXPIRED, RELEASED: state is in the reaper's partial index).
DROP INDEX docket_assignments_contributor;
