-- The feeds with changes compaction has not looked at yet, so that a maintenance pass finds them
-- without reading every feed (100,000 feeds cost a pass 40–55 ms). Its price: an apply's update
-- of a feed's head is no longer a HOT update (README, "Growth, maintenance and bootstrap").
CREATE INDEX feeds_uncompacted ON feeds (scope) WHERE head > compacted;
