package import SyncGateCore
package import SyncGateWire
package import SyncGateStorage
import SyncGateConcurrency

/// The front's view of a store, counting every call by name; optionally with a notifier that
/// never hears anything (every notification lost), and a hook run once after a pull's read.
package final class CountingFrontStore: FrontStore {
    package let base: any FrontStore
    package let notifier: ChangeNotifier
    private let calls = Locked<[String: Int]>([:])
    private let afterPull = Locked<(@Sendable () async throws -> Void)?>(nil)
    private let pullsFail = Locked(false)
    private let replica = Locked<(replicated: Bool, page: PullResult?)>((false, nil))
    private let keyLookupGate = Locked<TestGate?>(nil)
    private let keyLookupException = Locked<String?>(nil)
    private let feedReadGate = Locked<TestGate?>(nil)
    private let feedReadCalls = Locked<[[FeedReadRequest]]>([])

    /// - Parameter deaf: the front hears no notification at all: only the safety net wakes it.
    package init(_ base: any FrontStore, deaf: Bool = false) {
        self.base = base
        self.notifier = deaf ? ChangeNotifier() : base.notifier
    }

    package var driverName: String { base.driverName }

    /// Calls per method name since the last ``reset()``.
    package var counts: [String: Int] { calls.value }
    package func count(_ name: String) -> Int { calls.value[name, default: 0] }
    package func reset() { calls.update { $0 = [:] } }

    /// Runs `body` once, right after the next pull has read the store and before the waiter
    /// that made it arms: the window a lost wake-up would hide in.
    package func onceAfterNextPull(_ body: @escaping @Sendable () async throws -> Void) {
        afterPull.update { $0 = body }
    }

    private func record(_ name: String) {
        calls.update { $0[name, default: 0] += 1 }
    }

    package func enqueue(_ job: QueuedJob, limits: QueueLimits) async throws -> EnqueueResult {
        record("enqueue")
        return try await base.enqueue(job, limits: limits)
    }

    package func job(id: Int64, userID: String) async throws -> JobRecord? {
        record("job")
        return try await base.job(id: id, userID: userID)
    }

    /// While on, every pull fails as an unreachable database's would.
    package func failPulls(_ on: Bool) { pullsFail.update { $0 = on } }

    /// Plays a read replica behind the primary from now on: the next pull answers `page` (read
    /// before some change), and a pull that must be the latest reads the base.
    package func answerNextPullAsAReplicaBehind(with page: PullResult) {
        replica.update { $0 = (true, page) }
    }

    package var readsFromReplicas: Bool { replica.value.replicated || base.readsFromReplicas }

    package func pullLatest(_ query: PullQuery) async throws -> PullResult {
        guard replica.value.replicated else { return try await pull(query) }
        record("pullLatest")
        return try await base.pullLatest(query)
    }

    package func pull(_ query: PullQuery) async throws -> PullResult {
        record("pull")
        if pullsFail.value { throw StoreUnavailableError("pull: this test's replica is down") }
        if let stale = replica.update({ replica in defer { replica.page = nil }; return replica.page }) { return stale }
        let page = try await base.pull(query)
        if let hook = afterPull.update({ hook in defer { hook = nil }; return hook }) {
            try await hook()
        }
        return page
    }

    package func readableScopes(userID: String) async throws -> [Scope] {
        record("readableScopes")
        return try await base.readableScopes(userID: userID)
    }

    package func watchState(feeds: [Scope], users: [String]) async throws -> WatchState {
        record("watchState")
        return try await base.watchState(feeds: feeds, users: users)
    }

    /// Each `readFeeds` call's requests, in call order.
    package var feedReads: [[FeedReadRequest]] { feedReadCalls.value }

    /// Holds the next `readFeeds` call (and only it) until `gate` opens.
    package func holdNextFeedRead(until gate: TestGate) { feedReadGate.update { $0 = gate } }

    package func readFeeds(_ requests: [FeedReadRequest]) async throws -> [FeedSlice] {
        record("readFeeds")
        feedReadCalls.update { $0.append(requests) }
        if let gate = feedReadGate.update({ gate in defer { gate = nil }; return gate }) { try await gate.wait() }
        return try await base.readFeeds(requests)
    }

    package func schemaStatus() async throws -> SchemaStatus {
        record("schemaStatus")
        return try await base.schemaStatus()
    }

    /// Service key lookups wait for `gate` until it opens (`nil`: they do not wait), but those of
    /// the hash `except`.
    package func holdKeyLookups(until gate: TestGate?, except: String? = nil) {
        keyLookupGate.update { $0 = gate }
        keyLookupException.update { $0 = except }
    }

    package func serviceKey(hash: String) async throws -> ServiceKeyRecord? {
        record("serviceKey")
        if let gate = keyLookupGate.value, hash != keyLookupException.value { try await gate.wait() }
        return try await base.serviceKey(hash: hash)
    }

    package func registerPush(_ device: DeviceKey, _ registration: PushRegistration) async throws {
        record("registerPush")
        try await base.registerPush(device, registration)
    }

    package func pushRegistration(_ device: DeviceKey) async throws -> StoredPushRegistration? {
        record("pushRegistration")
        return try await base.pushRegistration(device)
    }

    package func unregisterPush(_ device: DeviceKey) async throws -> Bool {
        record("unregisterPush")
        return try await base.unregisterPush(device)
    }

    package func publishPresence(front: String, added: [DeviceKey], removed: [DeviceKey], lifetimeMilliseconds: Int64) async throws -> Bool {
        record("publishPresence")
        return try await base.publishPresence(front: front, added: added, removed: removed, lifetimeMilliseconds: lifetimeMilliseconds)
    }

    package func endPresence(front: String) async throws {
        record("endPresence")
        try await base.endPresence(front: front)
    }

    package func entity(_ key: EntityKey) async throws -> EntityState? {
        record("entity")
        return try await base.entity(key)
    }

    package func currentEntities(in scope: Scope, types: Set<String>?, after: EntityPosition?, limit: Int) async throws -> [EntityState] {
        record("currentEntities")
        return try await base.currentEntities(in: scope, types: types, after: after, limit: limit)
    }
}
