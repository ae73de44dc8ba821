-- As PostgreSQL's 0019_service_key_reach.sql: whom a service key may act for (NULL: everyone).
ALTER TABLE service_keys ADD COLUMN reach TEXT;
