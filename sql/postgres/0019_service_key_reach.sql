-- Whom a service key may act for: `{"users": [...], "households": [...]}`, or NULL for everyone
-- (docs/service-api.md). A key with a reach stores its scopes as `write@reach`…, names that
-- servers built before this migration do not know: they grant such a key nothing, never more
-- than its reach.
ALTER TABLE service_keys ADD COLUMN reach text;
