-- A judgment tainted because a QA review rejected its unit (UnitRedo), as
-- opposed to tainted because its contributor was flagged: forgiving the
-- contributor lifts the flag's taint only, never a reviewer's rejection
-- (docs/quality.md, "Flagging and tainting"). A NOT NULL column with a
-- constant default is a catalog change only (no table rewrite).
ALTER TABLE docket_judgments ADD COLUMN rejected boolean NOT NULL DEFAULT false;
