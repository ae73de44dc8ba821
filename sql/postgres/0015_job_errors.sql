-- Every failed attempt of a job, for operators (docs/admin.md): `[{"at", "attempt", "error"}]`,
-- the last 20, appended when an attempt is retried or the job dies. A nullable column without
-- a default rewrites nothing; the apply path never writes it.
ALTER TABLE jobs ADD COLUMN errors jsonb;
