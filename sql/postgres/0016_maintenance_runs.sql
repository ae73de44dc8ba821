-- The last maintenance passes and what each did, for operators (docs/admin.md): written by the
-- process that ran the pass (one a minute cluster-wide), the last 50 kept.
CREATE TABLE maintenance_runs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    finished_at  bigint NOT NULL, -- milliseconds since the epoch
    milliseconds bigint NOT NULL,
    report       text   NOT NULL  -- JSON: what it removed
);
