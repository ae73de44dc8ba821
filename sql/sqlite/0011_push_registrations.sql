-- Push nudges (docs/push.md): as PostgreSQL's 0014_push_registrations.sql. Times are
-- milliseconds since the epoch; pending_scopes is a JSON array of scope keys.
CREATE TABLE push_registrations (
    user_id         TEXT    NOT NULL,
    device_id       TEXT    NOT NULL,
    provider        TEXT    NOT NULL CHECK (provider IN ('apns', 'fcm')),
    token           TEXT    NOT NULL,
    topic           TEXT,
    environment     TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    pending_scopes  TEXT,
    pending_since   INTEGER,
    pending_version INTEGER NOT NULL DEFAULT 0,
    due_at          INTEGER,
    last_sent_at    INTEGER,
    attempts        INTEGER NOT NULL DEFAULT 0,
    leased_until    INTEGER,
    held_live_at    INTEGER,
    last_error      TEXT,
    PRIMARY KEY (user_id, device_id)
) WITHOUT ROWID;
CREATE INDEX push_registrations_due ON push_registrations (due_at) WHERE due_at IS NOT NULL;

CREATE TABLE push_positions (
    scope  TEXT    PRIMARY KEY,
    nudged INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE push_fronts (
    front      TEXT    PRIMARY KEY,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE push_presence (
    user_id   TEXT NOT NULL,
    device_id TEXT NOT NULL,
    front     TEXT NOT NULL,
    PRIMARY KEY (user_id, device_id, front)
) WITHOUT ROWID;
CREATE INDEX push_presence_front ON push_presence (front);

ALTER TABLE changes ADD COLUMN writer TEXT;
