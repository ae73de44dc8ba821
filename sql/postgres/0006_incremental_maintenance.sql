-- Maintenance proportional to new work (README, "Retention"): compaction remembers, per feed, the
-- sequence number up to which it has looked, and next time reads only the changes after it; the
-- tombstone purge finds old tombstones by index instead of scanning every change.
ALTER TABLE feeds ADD COLUMN compacted bigint NOT NULL DEFAULT 0;
CREATE INDEX changes_tombstones ON changes (updated_at) WHERE data IS NULL;
