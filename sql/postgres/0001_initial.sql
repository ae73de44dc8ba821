-- SyncGate schema, PostgreSQL. Applied by `syncgate migrate` (and by `serve` at start) under an
-- advisory lock; recorded in syncgate_migrations.

-- Push jobs: the durable queue between the HTTP front and the workers.
CREATE TABLE jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id          text        NOT NULL,
    device_id        text        NOT NULL,
    state            text        NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'running', 'retrying', 'done', 'dead')),
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL,
    run_at           timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    lease_token      text,
    lease_expires_at timestamptz,
    operation_count  integer     NOT NULL,
    payload          text        NOT NULL,
    results          text,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
) WITH (
    -- A queue table churns: vacuum it early and often, leave room for HOT updates.
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 500,
    autovacuum_analyze_scale_factor = 0.02
);

-- The claim scans runnable jobs oldest first ...
CREATE INDEX jobs_runnable ON jobs (id) WHERE state IN ('queued', 'retrying');
-- ... and checks that no older job of the same user is unfinished (per-user order), which also
-- serves the per-user queue limit.
CREATE INDEX jobs_user_unfinished ON jobs (user_id, id) WHERE state IN ('queued', 'running', 'retrying');
-- The rescuer finds expired leases.
CREATE INDEX jobs_running_leases ON jobs (lease_expires_at) WHERE state = 'running';
-- Retention deletes finished jobs by age.
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE state IN ('done', 'dead');

-- The newest finished job of each device (the pull's device_watermark); outlives job retention.
CREATE TABLE devices (
    user_id              text        NOT NULL,
    device_id            text        NOT NULL,
    last_finished_job_id bigint      NOT NULL,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, device_id)
);

-- Entities, keyed by scope ('u:<user>' or 'h:<household>'), type and id. data is NULL for a
-- tombstone. meta holds per-field versions (field_merge) and item tombstones (items_merge).
CREATE TABLE entities (
    scope       text        NOT NULL,
    entity_type text        NOT NULL,
    entity_id   text        NOT NULL,
    version     bigint      NOT NULL,
    data        jsonb,
    meta        jsonb,
    client_ts   bigint      NOT NULL,  -- milliseconds since the epoch, of the winning write
    updated_at  bigint      NOT NULL,  -- milliseconds since the epoch, server time
    PRIMARY KEY (scope, entity_type, entity_id)
);

-- Daily summaries recompute from a user's food logs of one day.
CREATE INDEX entities_food_log_days ON entities (scope, (data ->> 'loggedDate'))
    WHERE entity_type = 'foodLogs' AND data IS NOT NULL;

-- One row per feed. Its row lock serialises writers of the feed, so sequence numbers are
-- assigned in commit order. floor: the highest sequence number whose tombstones were purged.
CREATE TABLE feeds (
    scope text   PRIMARY KEY,
    head  bigint NOT NULL DEFAULT 0,
    floor bigint NOT NULL DEFAULT 0
);

-- The change feeds.
CREATE TABLE changes (
    scope       text   NOT NULL,
    seq         bigint NOT NULL,
    entity_type text   NOT NULL,
    entity_id   text   NOT NULL,
    version     bigint NOT NULL,
    data        jsonb,            -- NULL for a delete
    updated_at  bigint NOT NULL,  -- milliseconds since the epoch
    PRIMARY KEY (scope, seq)
);

-- Compaction finds superseded changes of one entity.
CREATE INDEX changes_entity ON changes (scope, entity_type, entity_id, seq);

-- Idempotency records: a key answers `duplicate` with the version it produced.
CREATE TABLE applied_operations (
    user_id         text   NOT NULL,
    idempotency_key text   NOT NULL,
    version         bigint,
    applied_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, idempotency_key)
);
CREATE INDEX applied_operations_age ON applied_operations (applied_at);

CREATE TABLE households (
    household_id text        PRIMARY KEY,
    owner_id     text        NOT NULL,
    archived     boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE household_members (
    household_id text NOT NULL REFERENCES households (household_id),
    user_id      text NOT NULL,
    role         text NOT NULL CHECK (role IN ('owner', 'member')),
    joined_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (household_id, user_id)
);
CREATE INDEX household_members_user ON household_members (user_id);

-- Force-resync epochs: a cursor issued under an older epoch answers force_resync.
CREATE TABLE users (
    user_id      text   PRIMARY KEY,
    resync_epoch bigint NOT NULL DEFAULT 0
);

CREATE TABLE settings (
    key   text   PRIMARY KEY,
    value bigint NOT NULL
);
INSERT INTO settings (key, value) VALUES ('resync_epoch', 0);
