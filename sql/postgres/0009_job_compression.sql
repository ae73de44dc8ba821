-- A job's payload and results are compressed with lz4 instead of pglz.
--
-- Both are text that PostgreSQL compresses once a row passes its ~2 KB threshold: a 10-operation
-- push's row often does (payload ~1.8 KB), and a 1,000-operation push stores ~180 KB of payload
-- and ~160 KB of results. pglz compressed them in the enqueue's and the apply's statements, on
-- the path every push waits on: pglz_compress was 7.5 % of PostgreSQL's CPU during a stream of
-- 1,000-operation pushes (`perf record -a`). lz4 compresses faster and less tightly (that push:
-- 29 KB and 15 KB stored instead of 23 KB and 9 KB). Only values written from now on are
-- affected; older rows keep pglz, and either reads back the same text.
--
-- A server built without lz4 keeps pglz: the migration must not fail there (nor on a server
-- that does not know SET COMPRESSION), so the ALTER runs dynamically and its error is caught.
DO $$
BEGIN
    EXECUTE 'ALTER TABLE jobs ALTER COLUMN payload SET COMPRESSION lz4, ALTER COLUMN results SET COMPRESSION lz4';
EXCEPTION WHEN feature_not_supported OR syntax_error THEN
    RAISE NOTICE 'jobs keep pglz compression: %', SQLERRM;
END
$$;
