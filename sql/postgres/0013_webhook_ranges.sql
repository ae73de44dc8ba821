-- Webhook messages hold a range of their feed instead of a copy of its changes: the sender
-- renders the body from the feed at each attempt (docs/webhooks.md). The copy wrote every change
-- a second time, and each claim and finish rewrote it with its row; with one subscription the
-- write path kept 0.93-0.96 of its throughput (docs/performance-log.md).
--
-- Compaction and the tombstone purge now stay below each feed's oldest undelivered message, which
-- the index below finds. A message made before this migration is rendered from what its feed
-- still holds: changes compaction removed since are not sent (newer ones of the same entities are).
ALTER TABLE webhook_deliveries DROP COLUMN body, DROP COLUMN change_count;
CREATE INDEX webhook_deliveries_held ON webhook_deliveries (scope, first_seq) WHERE delivered_at IS NULL;
