import Synchronization

/// The Prometheus series SyncGate exports (`GET /metrics` on a front, `syncgate worker
/// --metrics-port`). One list, so the README, the Grafana dashboard in `deploy/` and the tests
/// name the same things. Durations are histograms in seconds; counters end in `_total`.
package enum MetricName {
    /// Webhook delivery attempts by `outcome` (`delivered`, `retry`, `paused`).
    package static let webhookDeliveries = "syncgate_webhook_deliveries_total"
    /// Changes delivered to receivers (a delivery carries one or more).
    package static let webhookChanges = "syncgate_webhook_changes_delivered_total"
    /// From a change's commit to its delivery's 2xx answer.
    package static let webhookLag = "syncgate_webhook_lag_seconds"
    /// Deliveries not yet delivered, over every subscription (sampled).
    package static let webhookPending = "syncgate_webhook_pending"

    /// Push nudges by `provider` (apns, fcm) and `outcome`: sent, retry, unregistered, rejected,
    /// given_up, and `live` for a due nudge dropped because its device had a live connection.
    package static let nudges = "syncgate_nudges_total"
    /// From the oldest change a nudge announces committing to the provider accepting the nudge
    /// (the coalescing interval included).
    package static let nudgeLatency = "syncgate_nudge_latency_seconds"
    /// Devices with a nudge pending (sampled).
    package static let nudgesPending = "syncgate_nudges_pending"

    /// Requests answered, by `route` (the matched pattern, e.g. `/v1/sync/pull`), `method` and `status`.
    package static let httpRequests = "syncgate_http_requests_total"
    /// Request latency by `route` and `method` (event streams: until the stream ends).
    package static let httpRequestDuration = "syncgate_http_request_duration_seconds"
    /// Long-polls (`kind="long_poll"`) and event streams (`kind="events"`) open now.
    package static let liveConnections = "syncgate_live_connections"

    /// Jobs by `state` (queued, running, retrying, done, dead), sampled from the jobs table.
    package static let jobs = "syncgate_jobs"
    /// Jobs not finished (queued + running + retrying), sampled.
    package static let queueDepth = "syncgate_queue_depth"
    /// Age of the oldest queued or retrying job (0 when none), sampled.
    package static let queueOldestAge = "syncgate_queue_oldest_runnable_age_seconds"
    /// Job attempts this process finished, by `outcome`: done, retry, dead, lease_lost.
    package static let jobAttempts = "syncgate_job_attempts_total"
    /// How long one job's apply took (claim excluded).
    package static let applyDuration = "syncgate_apply_duration_seconds"
    /// From the push's enqueue to its job's commit.
    package static let pushToApply = "syncgate_push_to_apply_seconds"
    /// Operations applied, by `entity_type` and `result` (applied, merged, server_wins, rejected).
    package static let operations = "syncgate_operations_total"

    /// Pooled database connections in use (PostgreSQL; a SQLite store reports 0).
    package static let poolInUse = "syncgate_db_pool_connections_in_use"
    /// Callers waiting for a pooled connection.
    package static let poolWaiting = "syncgate_db_pool_waiting"

    /// Duration of a maintenance pass this process ran.
    package static let maintenanceDuration = "syncgate_maintenance_pass_duration_seconds"
    /// Rows maintenance removed, by `kind`: jobs, idempotency_records, tombstones, compacted_changes.
    package static let maintenanceRemoved = "syncgate_maintenance_rows_removed_total"

    /// Pulls of a front with read replicas, by `outcome`: `replica` (a standby answered),
    /// `behind` (the standby had not replayed what the cursor saw: the primary answered),
    /// `failed` (the standby failed or rests after a failure: the primary answered), `latest`
    /// (the caller needed the primary: a live wake-up, or a standby page older than a known head).
    package static let replicaPulls = "syncgate_replica_pulls_total"

    /// Every name above, for the checks that keep dashboards and docs honest.
    package static let all = [
        httpRequests, httpRequestDuration, liveConnections, jobs, queueDepth, queueOldestAge, jobAttempts,
        applyDuration, pushToApply, operations, poolInUse, poolWaiting, maintenanceDuration, maintenanceRemoved, replicaPulls,
        webhookDeliveries, webhookChanges, webhookLag, webhookPending, nudges, nudgeLatency, nudgesPending,
    ]
}

/// Metric handles by their label values, made once: creating one per event goes through the
/// metrics backend's registry (a lock and a lookup) on every request or job.
package final class MetricHandles<Key: Hashable & Sendable, Handle: Sendable>: Sendable {
    private let handles = Mutex<[Key: Handle]>([:])
    private let make: @Sendable (Key) -> Handle

    package init(_ make: @escaping @Sendable (Key) -> Handle) {
        self.make = make
    }

    package subscript(key: Key) -> Handle {
        handles.withLock { handles in
            if let handle = handles[key] { return handle }
            let handle = make(key)
            handles[key] = handle
            return handle
        }
    }
}
