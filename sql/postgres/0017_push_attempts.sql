-- When a nudge to the device last went out, sent or not (milliseconds since the epoch): the
-- coalescing interval counts from it, so a device whose nudges the provider refuses is tried
-- once an interval, not at every mark pass.
ALTER TABLE push_registrations ADD COLUMN last_attempt_at bigint;
-- A token that moves to another device or user leaves its old registration, found by the token.
CREATE INDEX push_registrations_token ON push_registrations (provider, token);
