package import Logging
package import SyncGateCore
package import SyncGateWire
package import Tracing

// The store seen by each of its users, as PowerSync splits bucket storage and River its driver:
// each consumer depends only on the role it uses. ``SyncStore`` plays every role.

/// What the HTTP front needs: make pushes durable, answer job status, serve pulls.
package protocol FrontStore: Sendable {
    /// A short name for logs and `/readyz`: `postgres` or `sqlite`.
    var driverName: String { get }
    /// Where committed changes are announced (NOTIFY or in-process signals).
    var notifier: ChangeNotifier { get }

    /// Makes a push durable as one job, unless the caller or the queue is over its limit.
    func enqueue(_ job: QueuedJob, limits: QueueLimits) async throws -> EnqueueResult
    /// A job of `userID`, or `nil` when there is none (or it is another user's).
    func job(id: Int64, userID: String) async throws -> JobRecord?
    /// One page of the user's feeds after the query's cursor (from a read replica, if any).
    func pull(_ query: PullQuery) async throws -> PullResult
    /// One page as the primary has it now: for a caller that knows of a change a read replica
    /// may not have replayed yet. Without replicas, ``pull(_:)``.
    func pullLatest(_ query: PullQuery) async throws -> PullResult
    /// Whether ``pull(_:)`` may answer from a read replica (one behind the primary).
    var readsFromReplicas: Bool { get }
    /// The feeds a user reads now: their own and their households'.
    func readableScopes(userID: String) async throws -> [Scope]
    /// The heads of `feeds`, the scopes versions of `users` and the global resync epoch, in one
    /// read (the live waiters' safety net: one call per process, however many wait).
    func watchState(feeds: [Scope], users: [String]) async throws -> WatchState
    /// Feeds' changes after positions, with their floors, in request order: what waiting pulls
    /// need when only those feeds advanced (one read for every waiter at the same position, and
    /// the reads asked for together in one statement).
    func readFeeds(_ requests: [FeedReadRequest]) async throws -> [FeedSlice]
    /// The applied and the known schema versions, for readiness.
    func schemaStatus() async throws -> SchemaStatus
    /// The service key whose SHA-256 is `hash`, revoked or not (always from the primary: a
    /// revocation must not wait for a replica).
    func serviceKey(hash: String) async throws -> ServiceKeyRecord?
    /// The entity at `key` as it stands now, live or deleted (the primary's).
    func entity(_ key: EntityKey) async throws -> EntityState?
    /// Up to `limit` of a scope's live entities after `after`, in (type, id) order (the primary's).
    func currentEntities(in scope: Scope, types: Set<String>?, after: EntityPosition?, limit: Int) async throws -> [EntityState]
    /// A device's push address: stored, read and removed on the primary.
    func registerPush(_ device: DeviceKey, _ registration: PushRegistration) async throws
    func pushRegistration(_ device: DeviceKey) async throws -> StoredPushRegistration?
    func unregisterPush(_ device: DeviceKey) async throws -> Bool
    /// This front's live connections for push nudges (on the primary): its heartbeat, and the
    /// devices that opened their first or closed their last connection since it last published.
    func publishPresence(front: String, added: [DeviceKey], removed: [DeviceKey], lifetimeMilliseconds: Int64) async throws -> Bool
    func endPresence(front: String) async throws
}

extension FrontStore {
    package func pullLatest(_ query: PullQuery) async throws -> PullResult {
        try await pull(query)
    }

    package var readsFromReplicas: Bool { false }
}

/// What a worker needs: claim jobs, keep their leases, apply them, settle failures.
package protocol WorkerStore: Sendable {
    var notifier: ChangeNotifier { get }

    /// Claims up to `limit` runnable jobs, at most one per user, oldest first, leased for `leaseMilliseconds`.
    /// A claimed job whose payload does not decode goes `dead` on its own and is not returned.
    func claimJobs(workerID: String, limit: Int, leaseMilliseconds: Int64) async throws -> [ClaimedJob<JobPayload>]
    /// Extends the leases of jobs this worker still holds.
    func extendLeases(_ jobs: [JobLease], leaseMilliseconds: Int64) async throws
    /// Applies a claimed job in one transaction: effects, feeds, derived data, idempotency records, results.
    /// Returns ``ApplyOutcome/leaseLost`` (and changes nothing) when the job is no longer this worker's.
    func apply(_ job: ClaimedJob<JobPayload>, collections: Collections, now: Timestamp) async throws -> ApplyOutcome
    /// Applies claimed jobs of different users, jobs that share no feed together in one
    /// transaction, each in its trace context; each job's outcome, in order. One job's failure
    /// never fails another.
    func apply(_ jobs: [(job: ClaimedJob<JobPayload>, context: ServiceContext)], collections: Collections, now: Timestamp) async -> [Result<ApplyOutcome, any Error>]
    /// Records a failed attempt: back to `retrying` with a delay, or `dead` with every operation answered `INTERNAL`.
    /// Returns false when the job was no longer this worker's.
    @discardableResult
    func fail(_ job: ClaimedJob<JobPayload>, error: String, settlement: JobSettlement) async throws -> Bool
    /// Settles expired leases (workers that died) as failed attempts.
    func rescueExpiredLeases(policy: RetryPolicy, jitter: @escaping @Sendable () -> Double) async throws -> RescueReport
    /// The applied and the known schema versions: a worker waits for migrations.
    func schemaStatus() async throws -> SchemaStatus
}

extension WorkerStore {
    /// One transaction per job (stores that cannot apply jobs together).
    package func apply(
        _ jobs: [(job: ClaimedJob<JobPayload>, context: ServiceContext)], collections: Collections, now: Timestamp
    ) async -> [Result<ApplyOutcome, any Error>] {
        var outcomes: [Result<ApplyOutcome, any Error>] = []
        for (job, context) in jobs {
            do {
                outcomes.append(.success(try await ServiceContext.withValue(context) { try await apply(job, collections: collections, now: now) }))
            } catch {
                outcomes.append(.failure(error))
            }
        }
        return outcomes
    }
}

/// Retention, repair and inspection: the periodic maintenance pass and `syncgate admin`.
package protocol MaintenanceStore: Sendable {
    /// Runs `body` while holding the cluster-wide maintenance lock; `nil` if another process holds it.
    func withMaintenanceLock<Result: Sendable>(_ body: @escaping @Sendable () async throws -> Result) async throws -> Result?
    func deleteFinishedJobs(olderThanMilliseconds: Int64) async throws -> Int
    func pruneIdempotencyRecords(olderThanMilliseconds: Int64) async throws -> Int
    func compactFeeds() async throws -> CompactionReport
    func purgeTombstones(olderThanMilliseconds: Int64) async throws -> PurgeReport
    func forceResync(userID: String?) async throws
    func recomputeDerived(userID: String?, from: String?, through: String?, collections: Collections, now: Timestamp) async throws -> DerivationReport
    func stats() async throws -> StoreStats
    /// Records a maintenance pass for operators (the admin API's and console's last passes).
    func recordMaintenanceRun(milliseconds: Int64, report: JSONValue) async throws
    func listJobs(_ filter: JobFilter) async throws -> [JobRecord]
    func retryDeadJobs(ids: [Int64]?) async throws -> Int
    func households(userID: String?, after: String?, limit: Int?) async throws -> [HouseholdState]
    /// Stores a new service key; `false` when the name is taken (by a valid or revoked key).
    func createServiceKey(_ key: NewServiceKey) async throws -> Bool
    /// Every service key, revoked ones included, by name.
    func serviceKeys() async throws -> [ServiceKeyRecord]
    /// Revokes a valid key; `false` when no valid key has that name.
    func revokeServiceKey(name: String) async throws -> Bool
}

/// The schema: migrations and their status.
package protocol SchemaStore: Sendable {
    /// Applies pending migrations (safe when several processes start together); returns the versions applied.
    @discardableResult
    func migrate(logger: Logger) async throws -> [Int]
    func schemaStatus() async throws -> SchemaStatus
    /// The applied and pending migrations and whether this release can serve the schema.
    func migrationStatus() async throws -> MigrationStatus
    /// The SQL of the pending migrations, to apply by hand instead of `migrate`.
    func pendingMigrationScript() async throws -> String
}
