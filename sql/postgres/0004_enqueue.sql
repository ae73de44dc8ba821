-- A push becomes a job under a per-user lock, in one statement from the front.
--
-- The transaction-level advisory lock (key space 'SGQU', the user id's hash) serialises the
-- enqueues of one user: the queue limit is exact (the count, in a VOLATILE function under READ
-- COMMITTED, takes its snapshot after the lock is granted, so it sees every job a concurrent
-- push of that user committed), and a user's job ids are in commit order, so a worker that runs
-- a user's oldest unfinished job never passes one that commits later with a lower id (the
-- device watermark means "every push of this device up to here is finished"). This relies on
-- READ COMMITTED, PostgreSQL's default (and SyncGate's: it never raises the isolation level); a
-- server whose default_transaction_isolation is higher would count in a snapshot taken before the
-- lock. During a rolling upgrade from a release before this migration, its fronts still enqueue
-- without the lock: exactness and ordering hold once no such front is left.
CREATE FUNCTION syncgate_enqueue(
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
    PERFORM pg_notify(p_channel, p_notification);
    RETURN NEXT;
END
$$;
