-- Push nudges (docs/push.md): a silent `sync_nudge` push wakes a backgrounded app when a feed it
-- reads advances and the device has no live connection open. Nothing here is read by an apply;
-- the apply only records each change's writer, so that a device is not woken for its own.

-- Each device's push address, and its nudge state: one row per device however many changes
-- come, so a provider outage holds at most one pending nudge per device.
CREATE TABLE push_registrations (
    user_id         text    NOT NULL,
    device_id       text    NOT NULL,
    provider        text    NOT NULL CHECK (provider IN ('apns', 'fcm')),
    token           text    NOT NULL, -- APNs: the device token in lowercase hex; FCM: the registration token
    topic           text,             -- APNs: the app's bundle id
    environment     text,             -- APNs: sandbox or production
    created_at      bigint  NOT NULL, -- milliseconds since the epoch
    updated_at      bigint  NOT NULL,
    pending_scopes  text[],           -- feeds advanced since the last nudge; NULL: nothing pending
    pending_since   bigint,           -- commit time of the oldest change pending (the nudge latency)
    pending_version bigint  NOT NULL DEFAULT 0, -- raised by every pass that adds to the pending set
    due_at          bigint,           -- when the pending nudge may be sent: the coalescing interval or a retry's backoff
    last_sent_at    bigint,
    attempts        integer NOT NULL DEFAULT 0,
    leased_until    bigint,           -- a nudger is sending it; another may take it after this (a nudger that died)
    held_live_at    bigint,           -- found due while the device held a live connection: checked again before it is dropped
    last_error      text,
    PRIMARY KEY (user_id, device_id)
);
CREATE INDEX push_registrations_due ON push_registrations (due_at) WHERE due_at IS NOT NULL;

-- How far each feed that a registered device reads has been looked at for nudges. Only those
-- feeds have a row, so a deployment without registrations keeps none.
CREATE TABLE push_positions (
    scope  text   PRIMARY KEY,
    nudged bigint NOT NULL
);

-- Live connections (long-polls and event streams) per front process, which a front publishes
-- while nudging is configured; a front's rows count only while its heartbeat is fresh, so a
-- front that died stops holding its devices' nudges back within the heartbeat's lifetime.
CREATE TABLE push_fronts (
    front      text   PRIMARY KEY,
    expires_at bigint NOT NULL
);
CREATE TABLE push_presence (
    user_id   text NOT NULL,
    device_id text NOT NULL,
    front     text NOT NULL,
    PRIMARY KEY (user_id, device_id, front)
);
CREATE INDEX push_presence_front ON push_presence (front);

-- The device that wrote a change, as `<device id>/<user id>` (device ids hold no `/`); NULL for a
-- service key's change. A nullable column without a default rewrites nothing.
ALTER TABLE changes ADD COLUMN writer text;
