-- The feeds with changes compaction has not looked at yet, so that a maintenance pass finds them
-- without reading every feed.
CREATE INDEX feeds_uncompacted ON feeds (scope) WHERE head > compacted;
