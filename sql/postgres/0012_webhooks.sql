-- Change webhooks (docs/webhooks.md): an app's backend hears of every change in the feeds,
-- signed in the Standard Webhooks format. Nothing here is written by an apply: a worker's
-- announcer copies new changes into deliveries after they commit, and a sender posts them.

-- A receiver: where to post, the secret to sign with (`whsec_…`; HMAC needs the secret itself,
-- so it is stored as given), and which changes it wants. A paused subscription still collects
-- deliveries; they are sent once it is resumed or replayed.
CREATE TABLE webhook_subscriptions (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text    NOT NULL UNIQUE,
    url           text    NOT NULL,
    secret        text    NOT NULL,
    entity_types  text,             -- comma-separated; NULL: every type
    events        text    NOT NULL, -- comma-separated: created, updated, deleted, membership
    created_at    bigint  NOT NULL, -- milliseconds since the epoch
    paused_at     bigint,
    paused_reason text
);

-- One request: consecutive changes of one feed for one subscription. Its body is fixed when it
-- is copied, so every attempt sends the same bytes under the same webhook-id. Delivered rows
-- stay for the replay window (`syncgate admin webhooks replay`), then maintenance deletes them.
CREATE TABLE webhook_deliveries (
    id              bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscription_id bigint  NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
    scope           text    NOT NULL,
    first_seq       bigint  NOT NULL,
    last_seq        bigint  NOT NULL,
    change_count    integer NOT NULL,
    body            text    NOT NULL,
    committed_at    bigint  NOT NULL, -- the newest change's commit time (the delivery lag)
    created_at      bigint  NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at bigint  NOT NULL,
    last_error      text,
    delivered_at    bigint
);
-- A sender takes the oldest undelivered delivery of each (subscription, feed): feed order.
-- Bodies are compressed with lz4, not pglz, as jobs' payloads (0009): a second's changes of a
-- feed pass the ~2 KB threshold, and pglz would cost PostgreSQL's CPU beside the applies.
DO $$
BEGIN
    EXECUTE 'ALTER TABLE webhook_deliveries ALTER COLUMN body SET COMPRESSION lz4';
EXCEPTION WHEN feature_not_supported OR syntax_error THEN
    RAISE NOTICE 'webhook_deliveries keeps pglz compression: %', SQLERRM;
END
$$;
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (subscription_id, scope, id) WHERE delivered_at IS NULL;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE delivered_at IS NULL;
CREATE INDEX webhook_deliveries_replay ON webhook_deliveries (subscription_id, created_at);
CREATE INDEX webhook_deliveries_delivered ON webhook_deliveries (delivered_at) WHERE delivered_at IS NOT NULL;

-- How far each feed's changes have been copied into deliveries. Changes before this migration
-- are not announced. Compaction stays at or below it while a subscription exists, so that no
-- change is compacted away before it is copied. The index finds the feeds with changes to copy
-- without reading every feed, as feeds_uncompacted does for compaction.
ALTER TABLE feeds ADD COLUMN webhooked bigint NOT NULL DEFAULT 0;
UPDATE feeds SET webhooked = head;
CREATE INDEX feeds_unannounced ON feeds (scope) WHERE head > webhooked;
