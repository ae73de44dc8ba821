-- The last maintenance passes and what each did, for operators (docs/admin.md), the last 50 kept.
CREATE TABLE maintenance_runs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    finished_at  INTEGER NOT NULL, -- milliseconds since the epoch
    milliseconds INTEGER NOT NULL,
    report       TEXT    NOT NULL  -- JSON: what it removed
);
