-- The enqueue no longer notifies in its own transaction (when its caller passes no notification).
--
-- PostgreSQL serialises every committing transaction that sent a NOTIFY behind one database-wide
-- lock, held until its commit record is flushed (async.c, PreCommit_Notify): the enqueues of all
-- fronts then committed one fsync after another instead of sharing flushes. Measured with pgbench
-- (8 clients, one durable PostgreSQL 15): an INSERT commits 22,000 times a second, an INSERT with a
-- pg_notify in its transaction 6,400 times. A front now tells workers about new jobs in a
-- statement of its own that does not wait for the flush (AnnounceJobsStatement), after
-- the enqueue committed, coalescing the announcements of pushes that arrive meanwhile.
--
-- Fronts of a release before this one still pass a notification, and still notify with the insert.
CREATE OR REPLACE FUNCTION syncgate_enqueue(
    p_user text, p_device text, p_max_attempts bigint, p_operation_count bigint, p_payload text,
    p_at timestamptz, p_limit bigint, p_channel text, p_notification text
) RETURNS TABLE (queued integer, job_id bigint)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1397182805, hashtext(p_user));
    SELECT count(*)::integer INTO queued
    FROM jobs WHERE user_id = p_user AND state IN ('queued', 'running', 'retrying');
    IF queued >= p_limit THEN
        job_id := NULL;
        RETURN NEXT;
        RETURN;
    END IF;
    INSERT INTO jobs (user_id, device_id, max_attempts, operation_count, payload, run_at, created_at, updated_at)
    VALUES (p_user, p_device, p_max_attempts, p_operation_count, p_payload, p_at, p_at, p_at)
    RETURNING id INTO job_id;
    IF p_notification IS NOT NULL THEN
        PERFORM pg_notify(p_channel, p_notification);
    END IF;
    RETURN NEXT;
END
$$;
