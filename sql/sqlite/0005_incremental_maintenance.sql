-- Maintenance proportional to new work: compaction remembers, per feed, the sequence number up
-- to which it has looked; the tombstone purge finds old tombstones by index.
ALTER TABLE feeds ADD COLUMN compacted INTEGER NOT NULL DEFAULT 0;
CREATE INDEX changes_tombstones ON changes (updated_at) WHERE data IS NULL;
