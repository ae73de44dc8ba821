import SyncGateWire
import Logging
import SyncGateConcurrency

/// The sync cycle: push the outbox (following 202s), then pull until `has_more` is false,
/// starting over when the server asks. One cycle runs at a time.
final class SyncEngine: Sendable {
    let store: LocalStore
    let api: SyncAPI
    let events: EventHub
    let configuration: SyncClient.Configuration
    var status: StatusCenter { api.status }
    private let lock = AsyncLock()
    /// Set under ``lock`` by ``terminate(_:)``: a cycle that was waiting for the lock does not run.
    private let terminated = Locked(false)
    /// Serializes reading the outbox's count with publishing it, so the last count published is
    /// the newest read.
    private let pendingLock = AsyncLock()

    /// Resyncs one cycle may start before giving up (a server that keeps asking is broken).
    static let maximumResyncsPerCycle = 3

    /// The protocol's ranges (PROTOCOL.md), which the configuration is clamped to: a value out of
    /// range would make the server refuse every request with 400, and a refused push would read
    /// as writes that can never be pushed.
    enum ProtocolLimits {
        static let pushWait = 0...30_000
        static let pullWait = 0...60_000
        static let pullLimit = 1...1000
        static let operations = 1...1000
    }

    init(store: LocalStore, api: SyncAPI, events: EventHub, configuration: SyncClient.Configuration) {
        self.store = store
        self.api = api
        self.events = events
        self.configuration = configuration
    }

    var logger: Logger { configuration.logger }

    /// One cycle; waits for a cycle already running to finish first. Jobs are followed until
    /// `followUntil` at the latest (a background sync's share of its deadline), then left to the
    /// next sync, so the pull still runs.
    func sync(followUntil: ContinuousClock.Instant? = nil) async throws -> SyncReport {
        try await lock.withLock {
            if terminated.value { throw SyncGateClientError(.closed, "the client was closed") }
            do {
                var report = SyncReport()
                // A push the server (or a proxy) answered with an error it did not ask us to back
                // off from still lets the cycle pull: a write that cannot go out at the head of
                // the outbox must not also stop every download. The sync then throws it.
                var refusedPush: SyncGateClientError?
                do {
                    try await push(into: &report, followUntil: followUntil)
                } catch let error as SyncGateClientError where error.pullsAnyway {
                    refusedPush = error
                }
                status.update { $0.isUploading = false }
                try await pull(into: &report)
                if let refusedPush { throw refusedPush }
                report.pending = try await publishPendingWrites()
                let finished = try await store.recordSynced()
                status.update { status in
                    status.isUploading = false
                    status.isDownloading = false
                    status.download = nil
                    status.lastSyncedAt = finished
                    status.lastError = nil
                }
                return report
            } catch {
                await refreshPendingWrites()
                status.update { status in
                    status.isUploading = false
                    status.isDownloading = false
                    status.download = nil
                    if !(error is CancellationError) {
                        status.lastError = error as? SyncGateClientError ?? SyncGateClientError(.localStore, "\(error)")
                    }
                }
                throw error
            }
        }
    }

    /// Runs `body` once no cycle runs, and lets none run after it (sign-out erasing the store).
    func terminate<Result: Sendable>(_ body: () async throws -> Result) async throws -> Result {
        try await lock.withLock {
            terminated.update { $0 = true }
            return try await body()
        }
    }

    /// Publishes the outbox's count of undecided writes in the status, and returns it.
    func publishPendingWrites() async throws -> Int {
        try await pendingLock.withLock {
            let pending = try await store.pendingCount()
            status.update { $0.pendingWrites = pending }
            return pending
        }
    }

    /// ``publishPendingWrites()`` where its failure must not fail the caller: the count is
    /// informational, and a write that committed must not look failed because of it.
    func refreshPendingWrites() async {
        _ = try? await publishPendingWrites()
    }

    // MARK: - Push

    private func push(into report: inout SyncReport, followUntil: ContinuousClock.Instant?) async throws {
        let configured = OutboxBatcher.Limits(
            operations: Self.clamp(configuration.batchOperations, to: ProtocolLimits.operations), bytes: max(1, configuration.batchBytes)
        )
        var limits = configured
        while true {
            try Task.checkCancellation()
            switch try await store.nextBatch(limits: limits) {
            case .idle:
                return
            case .follow(let jobID):
                status.update { $0.isUploading = true }
                let keys = try await store.entries(ofJob: jobID)
                guard let answer = try await follow(jobID, until: followUntil) else {
                    logger.debug("job unknown to the server; pushing its writes again", metadata: ["syncgate.job": "\(jobID)"])
                    try await store.forgetJob(jobID)
                    continue
                }
                guard let results = answer.results else { return }
                if try await settle(keys, results, of: answer.jobID, into: &report) {
                    guard Self.splitsAfter(answer, of: keys, limits: &limits) else { return }
                }
            case .push(let batch):
                status.update { $0.isUploading = true }
                let keys = batch.map(\.idempotencyKey)
                let answer: JobAnswer
                do {
                    answer = try await api.push(batch, waitMilliseconds: Self.milliseconds(Self.wait(configuration.pushWait, until: followUntil), in: ProtocolLimits.pushWait))
                } catch let error as SyncGateClientError where (error.httpStatus == 400 && error.serverCode != nil) || error.httpStatus == 413 {
                    // The request as a whole was refused for its shape or size: some write in it
                    // can never be pushed. Halve the batch until that write is alone, then refuse it.
                    // Only SyncGate's own 400 says so: a proxy's (a header too large, a gateway
                    // misrouted) says nothing of the writes, and refusing them would empty the outbox.
                    if batch.count > 1 {
                        limits.operations = max(1, batch.count / 2)
                        continue
                    }
                    let code = error.serverCode ?? (error.httpStatus == 413 ? "PAYLOAD_TOO_LARGE" : "VALIDATION_ERROR")
                    if let outcome = try await store.refuse(idempotencyKey: keys[0], code: code, message: error.message) {
                        report.settled.append(outcome)
                        events.emit(.writeSettled(outcome))
                    }
                    limits = configured
                    continue
                }
                if let results = answer.results {
                    if try await settle(keys, results, of: answer.jobID, into: &report) {
                        guard Self.splitsAfter(answer, of: keys, limits: &limits) else { return }
                    }
                    continue
                }
                let jobID = String(answer.jobID)
                try await store.recordJob(jobID, for: keys)
                guard let followed = try await follow(jobID, until: followUntil) else {
                    try await store.forgetJob(jobID)
                    continue
                }
                guard let results = followed.results else { return }
                if try await settle(keys, results, of: followed.jobID, into: &report) {
                    guard Self.splitsAfter(followed, of: keys, limits: &limits) else { return }
                }
            }
        }
    }

    /// After a job that left writes to retry: whether to push them again at once in a batch half
    /// as large. A dead job applied none of its writes, and one of them may kill every job it is
    /// in (a stored row the server cannot read): halving lets the writes ahead of it through and
    /// leaves it alone at the head, pushed again on later syncs with its key. Anything else
    /// (a single write, a job that applied some) waits for the next sync.
    static func splitsAfter(_ answer: JobAnswer, of keys: [String], limits: inout OutboxBatcher.Limits) -> Bool {
        guard answer.state == .dead, keys.count > 1 else { return false }
        limits.operations = max(1, keys.count / 2)
        return true
    }

    /// Follows a job until it finishes or the follow-up time (or `until`) runs out; `nil` if the
    /// server does not know it.
    private func follow(_ jobID: String, until: ContinuousClock.Instant?) async throws -> JobAnswer? {
        let limit = ContinuousClock.now + configuration.jobFollowLimit
        let deadline = until.map { min($0, limit) } ?? limit
        while true {
            // At least a second (until the deadline): a wait of zero is answered at once.
            let wait = Self.wait(max(configuration.jobFollowWait, .seconds(1)), until: deadline)
            guard let answer = try await api.job(jobID, waitMilliseconds: Self.milliseconds(wait, in: ProtocolLimits.pushWait)) else {
                return nil
            }
            if answer.isFinished || ContinuousClock.now >= deadline { return answer }
        }
    }

    /// Applies the results of job `jobID`; returns whether some writes must wait for a later attempt.
    private func settle(_ keys: [String], _ results: [OperationResult], of jobID: Int64, into report: inout SyncReport) async throws -> Bool {
        let settlement = try await store.settle(batch: keys, results: results, jobID: jobID)
        for outcome in settlement.outcomes {
            events.emit(.writeSettled(outcome))
            if case .rejected(let code, _) = outcome.result {
                logger.debug("write rejected", metadata: ["syncgate.entity": "\(outcome.key)", "syncgate.code": "\(code)"])
            }
        }
        report.settled += settlement.outcomes
        return !settlement.retryable.isEmpty
    }

    // MARK: - Pull

    /// Pulls until `has_more` is false, starting over when the server asks. Part of ``sync()``,
    /// which holds the lock; tests call it alone.
    func pull(into report: inout SyncReport) async throws {
        // A first sync fills an empty store without its declared indexes and makes them at the end.
        let indexes = configuration.indexes
        guard !indexes.isEmpty, try await store.pullState().cursor == nil, try await store.isEmpty() else {
            return try await pullPages(into: &report)
        }
        try await store.dropDeclaredIndexes()
        // Made again in a task of its own: a cancelled sync (a deadline, stopLive) must not leave
        // the store without them (GRDB refuses a database access in a cancelled task).
        let store = self.store
        let remake = { try await Task { try await store.remake(indexes: indexes) }.value }
        do {
            try await pullPages(into: &report)
        } catch {
            try? await remake()
            throw error
        }
        try await remake()
    }

    private func pullPages(into report: inout SyncReport) async throws {
        let start = try await store.beginPull()
        var cursor = start.cursor
        // A pull from no cursor (a first sync, a resync, one of them resumed) brings history, not
        // news, to its last page; so does a household joined in this pull, on every page of it.
        var fromTheBeginning = cursor == nil || start.resyncing
        var joined: Set<String> = []
        status.update { $0.isDownloading = true; $0.download = DownloadProgress(isBootstrap: fromTheBeginning) }
        var resyncs = 0
        while true {
            try Task.checkCancellation()
            let reason: ResyncReason
            switch try await api.pull(cursor: cursor, limit: Self.clamp(configuration.pullPageSize, to: ProtocolLimits.pullLimit)) {
            case .cursorInvalid:
                reason = .cursorInvalid
            case .page(let page) where page.forceResync:
                reason = .forced
            case .page(let page):
                let effect = try await store.apply(page, epoch: start.epoch)
                report.pulledChanges += page.changes.count
                status.update { $0.download?.changes += page.changes.count }
                if !effect.joined.isEmpty || !effect.left.isEmpty {
                    events.emit(.householdsChanged(joined: effect.joined, left: effect.left))
                }
                joined.formUnion(page.scopesAdded)
                let byService = fromTheBeginning ? [] : page.changes.compactMap { change -> ServiceChange? in
                    if let household = change.householdID, joined.contains(household) { return nil }
                    return change.origin.map {
                        ServiceChange(
                            key: EntityKey(entityType: change.entityType, entityID: change.entityID, householdID: change.householdID),
                            origin: $0, deleted: change.data == nil
                        )
                    }
                }
                if !byService.isEmpty { events.emit(.changedByService(byService)) }
                if !page.hasMore { return }
                cursor = page.cursor
                continue
            }
            resyncs += 1
            guard resyncs <= Self.maximumResyncsPerCycle else {
                throw SyncGateClientError(.resyncLoop, "the server asked to start over \(resyncs) times in one sync")
            }
            logger.debug("starting over from the beginning of the feeds", metadata: ["syncgate.reason": "\(reason.rawValue)"])
            try await store.beginResync()
            report.resynced = reason
            events.emit(.resynced(reason))
            cursor = nil
            fromTheBeginning = true
            status.update { $0.download = DownloadProgress(isBootstrap: true) }
        }
    }

    /// Waits (long-poll) until the server has something after the current cursor, or `wait`
    /// passes; returns whether it has. Only a wake-up: the sync that follows reads the changes.
    func waitForChanges(wait: Duration) async throws -> Bool {
        let state = try await store.pullState()
        if state.resyncing { return true }
        switch try await api.pull(cursor: state.cursor, limit: 1, waitMilliseconds: Self.milliseconds(wait, in: ProtocolLimits.pullWait)) {
        case .cursorInvalid:
            return true
        case .page(let page):
            return !page.changes.isEmpty || page.hasMore || page.forceResync || !page.scopesAdded.isEmpty || !page.scopesRemoved.isEmpty
        }
    }

    /// `wait`, or the time left before `until` when that is shorter (never negative).
    static func wait(_ wait: Duration, until: ContinuousClock.Instant?) -> Duration {
        guard let until else { return wait }
        return max(.zero, min(wait, ContinuousClock.now.duration(to: until)))
    }

    /// Whole milliseconds of `duration`, within `range`.
    static func milliseconds(_ duration: Duration, in range: ClosedRange<Int>) -> Int {
        let (seconds, attoseconds) = duration.components
        let milliseconds = seconds > Int64(range.upperBound) ? Int64(range.upperBound) : seconds * 1000 + attoseconds / 1_000_000_000_000_000
        return clamp(Int(milliseconds), to: range)
    }

    static func clamp(_ value: Int, to range: ClosedRange<Int>) -> Int {
        min(max(value, range.lowerBound), range.upperBound)
    }
}
