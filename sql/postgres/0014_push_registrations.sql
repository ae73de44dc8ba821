-- Push nudges (docs/push.md): each device's push address, where a silent `sync_nudge` wakes the
-- app in the background. One per device, replaced when the device registers again.
CREATE TABLE push_registrations (
    user_id     text   NOT NULL,
    device_id   text   NOT NULL,
    provider    text   NOT NULL CHECK (provider IN ('apns', 'fcm')),
    token       text   NOT NULL, -- APNs: the device token in lowercase hex; FCM: the registration token
    topic       text,            -- APNs: the app's bundle id
    environment text,            -- APNs: sandbox or production
    created_at  bigint NOT NULL, -- milliseconds since the epoch
    updated_at  bigint NOT NULL,
    PRIMARY KEY (user_id, device_id)
);
