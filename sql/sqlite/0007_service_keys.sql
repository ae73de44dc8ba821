-- Service keys: the credentials of an app's own backend (`syncgate admin keys …`), apart from
-- users' tokens. Only the SHA-256 of a key is stored; the key itself is shown once, at creation.
-- A revoked key keeps its row (its name stays taken, and an operator can see when it went).
CREATE TABLE service_keys (
    name TEXT PRIMARY KEY,
    -- Hex SHA-256 of the whole key (`sgk_…`): keys are 256 random bits, so a fast hash suffices.
    key_hash TEXT NOT NULL UNIQUE,
    -- The key's last four characters, to tell keys apart in a listing.
    hint TEXT NOT NULL,
    -- Comma-separated, sorted: read, write, admin.
    scopes TEXT NOT NULL,
    -- Milliseconds since the epoch.
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
