-- Live waiters wake when what a user reads changes other than by a feed advancing: a household
-- joined, left or archived, or a resync asked for. The version rises in the same transaction,
-- so a waiter compares it with the one its last pull saw; notifications carry it.
ALTER TABLE users ADD COLUMN scopes_version bigint NOT NULL DEFAULT 0;
