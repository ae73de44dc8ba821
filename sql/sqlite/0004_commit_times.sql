-- Commit times: the seed apps' dialects read feeds by time (`since`), and must never skip a
-- change. Every change records the clock when its apply wrote it; every claim records when the
-- job was claimed (both the same SQL clock expression, SQLiteDriver.clockMilliseconds). A
-- reader's horizon is the lower of the clock and the oldest claim still running
-- (docs/dialects.md).
ALTER TABLE jobs ADD COLUMN claimed_at INTEGER;
ALTER TABLE changes ADD COLUMN committed_at INTEGER NOT NULL DEFAULT 0;
UPDATE changes SET committed_at = updated_at;
CREATE INDEX changes_commit_time ON changes (scope, committed_at);
