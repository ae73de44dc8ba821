-- As PostgreSQL's 0018_webhook_claims.sql: each claim, resume and replay of a message takes the
-- next number of its row, and an attempt's outcome is recorded only while the message holds its
-- claim's number.
ALTER TABLE webhook_deliveries ADD COLUMN claims INTEGER NOT NULL DEFAULT 0;
