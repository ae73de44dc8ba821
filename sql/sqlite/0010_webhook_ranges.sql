-- Webhook messages hold a range of their feed instead of a copy of its changes: as PostgreSQL's
-- 0013_webhook_ranges.sql.
ALTER TABLE webhook_deliveries DROP COLUMN body;
ALTER TABLE webhook_deliveries DROP COLUMN change_count;
CREATE INDEX webhook_deliveries_held ON webhook_deliveries (scope, first_seq) WHERE delivered_at IS NULL;
