-- Push nudges (docs/push.md): as PostgreSQL's 0014_push_registrations.sql. Times are
-- milliseconds since the epoch.
CREATE TABLE push_registrations (
    user_id     TEXT    NOT NULL,
    device_id   TEXT    NOT NULL,
    provider    TEXT    NOT NULL CHECK (provider IN ('apns', 'fcm')),
    token       TEXT    NOT NULL,
    topic       TEXT,
    environment TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (user_id, device_id)
) WITHOUT ROWID;
