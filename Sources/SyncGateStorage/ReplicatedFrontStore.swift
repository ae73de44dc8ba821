import CoreMetrics
package import Logging
import Metrics
import Synchronization
package import SyncGateCore
package import SyncGateWire

/// The front's store when pulls read from PostgreSQL hot standbys (`SYNCGATE_READ_DATABASE_URL`).
///
/// Pulls — bootstrap pages, plain pulls, a long-poll's first read — go to the standbys in turn;
/// everything else stays on the primary: pushes and job status (they must see their own
/// writes), the live machinery's small reads (notifications come from the primary, and a
/// waiter woken by one must read at least what it announced). A standby's answer that may be wrong only because the standby lags is refused and
/// the primary answers (``ReplicaVerdict``): a cursor never goes backwards and a cursor the
/// primary issued never gets `CURSOR_INVALID` from a standby. A standby that fails rests for
/// `restAfterFailure` while the primary answers its share.
package final class ReplicatedFrontStore: FrontStore {
    package let primary: any FrontStore
    package let replicas: [any FrontStore]
    let restAfterFailure: Duration
    private let logger: Logger
    private let turn = Atomic<Int>(0)
    /// Until when each standby rests after a failure.
    private let resting: Mutex<[ContinuousClock.Instant?]>
    /// The standbys whose last pull failed: a failure is logged when a standby starts failing,
    /// not again after each rest while it stays down, and a success after it says it is back.
    private let failing: Mutex<Set<Int>>
    private let outcomes = MetricHandles<String, Counter> { outcome in
        Counter(label: MetricName.replicaPulls, dimensions: [("outcome", outcome)])
    }

    package init(primary: any FrontStore, replicas: [any FrontStore], restAfterFailure: Duration = .seconds(5), logger: Logger) {
        precondition(!replicas.isEmpty, "a replicated store needs at least one replica")
        self.primary = primary
        self.replicas = replicas
        self.restAfterFailure = restAfterFailure
        self.logger = logger
        self.resting = Mutex(Array(repeating: nil, count: replicas.count))
        self.failing = Mutex([])
    }

    package var driverName: String { primary.driverName }
    package var notifier: ChangeNotifier { primary.notifier }

    package func pull(_ query: PullQuery) async throws -> PullResult {
        guard let index = nextReplica() else {
            outcomes[ReplicaVerdict.Reason.failed.rawValue].increment()
            return try await primary.pull(query)
        }
        let result: Result<PullResult, any Error>
        do {
            result = .success(try await replicas[index].pull(query))
        } catch {
            result = .failure(error)
        }
        // Reachable again (even when its page is behind): a later failure is a new outage.
        if case .success = result, failing.withLock({ $0.remove(index) }) != nil {
            logger.notice("a read replica answers again", metadata: ["syncgate.replica": "\(index)"])
        }
        switch ReplicaVerdict.of(result, bootstrap: query.cursor == nil) {
        case .answer:
            outcomes["replica"].increment()
            return try result.get()
        case .askPrimary(let reason):
            if reason == .failed, case .failure(let error) = result {
                rest(index, after: error)
            }
            outcomes[reason.rawValue].increment()
            return try await primary.pull(query)
        }
    }

    package var readsFromReplicas: Bool { true }

    package func pullLatest(_ query: PullQuery) async throws -> PullResult {
        outcomes["latest"].increment()
        return try await primary.pull(query)
    }

    /// The next standby in turn that is not resting; `nil` when all rest.
    private func nextReplica() -> Int? {
        let now = ContinuousClock.now
        // Unsigned: the counter wraps past Int.max without ever giving a negative index.
        let start = UInt(bitPattern: turn.add(1, ordering: .relaxed).oldValue)
        return resting.withLock { resting in
            for step in 0..<replicas.count {
                let index = Int((start &+ UInt(step)) % UInt(replicas.count))
                if let until = resting[index], until > now { continue }
                resting[index] = nil
                return index
            }
            return nil
        }
    }

    private func rest(_ index: Int, after error: any Error) {
        resting.withLock { $0[index] = .now + restAfterFailure }
        if failing.withLock({ $0.insert(index).inserted }) {
            logger.warning("a read replica failed; the primary answers its pulls for a while", metadata: [
                "syncgate.replica": "\(index)", "syncgate.error": "\(error)", "syncgate.rest_seconds": "\(restAfterFailure.components.seconds)",
            ])
        }
    }

    // MARK: - On the primary

    package func enqueue(_ job: QueuedJob, limits: QueueLimits) async throws -> EnqueueResult {
        try await primary.enqueue(job, limits: limits)
    }

    package func job(id: Int64, userID: String) async throws -> JobRecord? {
        try await primary.job(id: id, userID: userID)
    }

    package func readableScopes(userID: String) async throws -> [Scope] {
        try await primary.readableScopes(userID: userID)
    }

    package func watchState(feeds: [Scope], users: [String]) async throws -> WatchState {
        try await primary.watchState(feeds: feeds, users: users)
    }

    package func readFeeds(_ requests: [FeedReadRequest]) async throws -> [FeedSlice] {
        try await primary.readFeeds(requests)
    }

    package func schemaStatus() async throws -> SchemaStatus {
        try await primary.schemaStatus()
    }

    package func serviceKey(hash: String) async throws -> ServiceKeyRecord? {
        try await primary.serviceKey(hash: hash)
    }

    package func registerPush(_ device: DeviceKey, _ registration: PushRegistration) async throws {
        try await primary.registerPush(device, registration)
    }

    package func pushRegistration(_ device: DeviceKey) async throws -> StoredPushRegistration? {
        try await primary.pushRegistration(device)
    }

    package func unregisterPush(_ device: DeviceKey) async throws -> Bool {
        try await primary.unregisterPush(device)
    }

    package func publishPresence(front: String, added: [DeviceKey], removed: [DeviceKey], lifetimeMilliseconds: Int64) async throws -> Bool {
        try await primary.publishPresence(front: front, added: added, removed: removed, lifetimeMilliseconds: lifetimeMilliseconds)
    }

    package func endPresence(front: String) async throws {
        try await primary.endPresence(front: front)
    }

    package func entity(_ key: EntityKey) async throws -> EntityState? {
        try await primary.entity(key)
    }

    package func currentEntities(in scope: Scope, types: Set<String>?, after: EntityPosition?, limit: Int) async throws -> [EntityState] {
        try await primary.currentEntities(in: scope, types: types, after: after, limit: limit)
    }
}
