ALTER TABLE docket_assignments RESET (fillfactor);
ALTER TABLE docket_outbox RESET (fillfactor);
ALTER TABLE docket_units RESET (fillfactor);
