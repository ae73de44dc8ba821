-- Change webhooks (docs/webhooks.md): as PostgreSQL's 0012_webhooks.sql. Times are
-- milliseconds since the epoch.
CREATE TABLE webhook_subscriptions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT    NOT NULL UNIQUE,
    url           TEXT    NOT NULL,
    secret        TEXT    NOT NULL,
    entity_types  TEXT,
    events        TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    paused_at     INTEGER,
    paused_reason TEXT
);

CREATE TABLE webhook_deliveries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    subscription_id INTEGER NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
    scope           TEXT    NOT NULL,
    first_seq       INTEGER NOT NULL,
    last_seq        INTEGER NOT NULL,
    change_count    INTEGER NOT NULL,
    body            TEXT    NOT NULL,
    committed_at    INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error      TEXT,
    delivered_at    INTEGER
);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (subscription_id, scope, id) WHERE delivered_at IS NULL;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE delivered_at IS NULL;
CREATE INDEX webhook_deliveries_replay ON webhook_deliveries (subscription_id, created_at);
CREATE INDEX webhook_deliveries_delivered ON webhook_deliveries (delivered_at) WHERE delivered_at IS NOT NULL;

ALTER TABLE feeds ADD COLUMN webhooked INTEGER NOT NULL DEFAULT 0;
UPDATE feeds SET webhooked = head;
CREATE INDEX feeds_unannounced ON feeds (scope) WHERE head > webhooked;
