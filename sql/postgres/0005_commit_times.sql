-- Commit times: the seed apps' dialects (README, "Seed app dialects") read feeds by time
-- (`since`), and must never skip a change, as the cursor never does. Every change records the
-- database clock at the start of its apply transaction; every claim records when the job was
-- claimed. A reader's horizon is the lower of its own clock and the oldest claim still running:
-- no transaction that commits later can write a change at or below it (docs/dialects.md).
ALTER TABLE jobs ADD COLUMN claimed_at timestamptz;

ALTER TABLE changes ADD COLUMN committed_at bigint;
-- Earlier changes are all committed: their server time stands in.
UPDATE changes SET committed_at = updated_at;
-- now() is the apply transaction's start: after its job's claim committed.
ALTER TABLE changes ALTER COLUMN committed_at SET DEFAULT (floor(extract(epoch FROM now()) * 1000))::bigint;
ALTER TABLE changes ALTER COLUMN committed_at SET NOT NULL;
CREATE INDEX changes_commit_time ON changes (scope, committed_at);
