-- Every failed attempt of a job, for operators (docs/admin.md): `[{"at", "attempt", "error"}]`,
-- the last 20, appended when an attempt is retried or the job dies.
ALTER TABLE jobs ADD COLUMN errors TEXT;
