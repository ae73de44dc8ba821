-- SyncGate schema, SQLite (the embedded default: one process, WAL). Applied by `syncgate serve`
-- and `syncgate migrate`; recorded in syncgate_migrations. Times are milliseconds since the epoch.

-- Push jobs. AUTOINCREMENT: job ids are never reused, so device watermarks only move forward.
CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id          TEXT    NOT NULL,
    device_id        TEXT    NOT NULL,
    state            TEXT    NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'running', 'retrying', 'done', 'dead')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    run_at           INTEGER NOT NULL,
    lease_owner      TEXT,
    lease_token      TEXT,
    lease_expires_at INTEGER,
    operation_count  INTEGER NOT NULL,
    payload          TEXT    NOT NULL,
    results          TEXT,
    last_error       TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    finished_at      INTEGER
);

CREATE INDEX jobs_runnable ON jobs (id) WHERE state IN ('queued', 'retrying');
CREATE INDEX jobs_user_unfinished ON jobs (user_id, id) WHERE state IN ('queued', 'running', 'retrying');
CREATE INDEX jobs_running_leases ON jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE state IN ('done', 'dead');

CREATE TABLE devices (
    user_id              TEXT    NOT NULL,
    device_id            TEXT    NOT NULL,
    last_finished_job_id INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    PRIMARY KEY (user_id, device_id)
) WITHOUT ROWID;

-- data is NULL for a tombstone; meta holds per-field versions and item tombstones.
CREATE TABLE entities (
    scope       TEXT    NOT NULL,
    entity_type TEXT    NOT NULL,
    entity_id   TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    data        TEXT,
    meta        TEXT,
    client_ts   INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (scope, entity_type, entity_id)
) WITHOUT ROWID;

CREATE INDEX entities_food_log_days ON entities (scope, json_extract(data, '$.loggedDate'))
    WHERE entity_type = 'foodLogs' AND data IS NOT NULL;

CREATE TABLE feeds (
    scope TEXT    PRIMARY KEY,
    head  INTEGER NOT NULL DEFAULT 0,
    floor INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

CREATE TABLE changes (
    scope       TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    entity_type TEXT    NOT NULL,
    entity_id   TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    data        TEXT,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (scope, seq)
) WITHOUT ROWID;

CREATE INDEX changes_entity ON changes (scope, entity_type, entity_id, seq);

CREATE TABLE applied_operations (
    user_id         TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    version         INTEGER,
    applied_at      INTEGER NOT NULL,
    PRIMARY KEY (user_id, idempotency_key)
) WITHOUT ROWID;
CREATE INDEX applied_operations_age ON applied_operations (applied_at);

CREATE TABLE households (
    household_id TEXT    PRIMARY KEY,
    owner_id     TEXT    NOT NULL,
    archived     INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE household_members (
    household_id TEXT NOT NULL REFERENCES households (household_id),
    user_id      TEXT NOT NULL,
    role         TEXT NOT NULL CHECK (role IN ('owner', 'member')),
    joined_at    INTEGER NOT NULL,
    PRIMARY KEY (household_id, user_id)
) WITHOUT ROWID;
CREATE INDEX household_members_user ON household_members (user_id);

CREATE TABLE users (
    user_id      TEXT    PRIMARY KEY,
    resync_epoch INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

CREATE TABLE settings (
    key   TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO settings (key, value) VALUES ('resync_epoch', 0);
