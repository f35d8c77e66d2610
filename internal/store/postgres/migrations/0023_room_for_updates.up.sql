-- Room on the page for a row's next version. An assignment is updated once
-- after its insert (SUBMITTED, EXPIRED or RELEASED) and an outbox row once
-- (the relay's mark). Neither update is HOT (state is in the reaper's
-- partial index; published_at, publish_seq and webhooks_at are in the
-- outbox's), but on a full page the new version must go to another page:
-- PostgreSQL then first writes a lock of the old version to the WAL (a
-- record of its own), finds a page through the free space map or extends
-- the table, and dirties a second buffer. Rows are inserted in the order
-- they are updated in, so pages filled to the brim were the rule:
-- 42 % of the submits and nearly every mark moved to another page
-- (docs/benchmarks.md, "Sixth round: what a judgment writes").
--
-- A unit is updated up to seven times (each take, each judgment's count,
-- the finalization), most of them HOT since 0021, but HOT needs room on
-- the unit's page: about 1,000 of the 25,000 updates of a pool of 5,000
-- units that could be HOT were not, for want of it (each then a new
-- version with up to five index entries). COPY fills the pages of a new
-- pool to the brim; 10 % is left free now.
--
-- The settings apply to pages filled from now on.
ALTER TABLE docket_assignments SET (fillfactor = 70);
ALTER TABLE docket_outbox SET (fillfactor = 50);
ALTER TABLE docket_units SET (fillfactor = 90);
