-- As PostgreSQL's 0017_push_attempts.sql: the coalescing interval counts from the last attempt,
-- sent or not, and a moved token's old registration is found by the token.
ALTER TABLE push_registrations ADD COLUMN last_attempt_at INTEGER;
CREATE INDEX push_registrations_token ON push_registrations (provider, token);
