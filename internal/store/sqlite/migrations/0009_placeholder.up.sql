-- Placeholder: version 9 belongs to another branch's migration. The lead
-- replaces this file with it when the branches merge.
SELECT 1;
