import ServiceLifecycle
import SyncGateCore
package import SyncGateWire
import SyncGateRuntime
package import SyncGateStorage

/// Where a job stands for the client that pushed it.
package enum JobProgress: Sendable, Hashable {
    case unfinished(Int64, JobState)
    case finished(FinishedJob)

    /// The job as read back; a finished job without results is a ``StoredDataError``.
    init(_ record: JobRecord) throws(StoredDataError) {
        self = try record.finished().map(Self.finished) ?? .unfinished(record.id, record.state)
    }

    var isFinished: Bool { if case .finished = self { true } else { false } }

    var state: JobState {
        switch self {
        case .unfinished(_, let state): state
        case .finished(let job): job.state
        }
    }
}

/// Waiting for something to commit: a job to finish, a feed to advance.
///
/// On graceful shutdown every wait ends at once with the current state.
struct LiveUpdates: Sendable {
    let store: any FrontStore
    let watcher: FeedWatcher
    let pollInterval: Duration
    let retryAfterSeconds: Int

    /// The job once it is finished, or as it is when `timeout` passes; `nil` if it is not the user's.
    ///
    /// A push's wait is short and its own: it subscribes to its job's notification, which carries
    /// the results when they fit, and reads the job at least every `pollInterval` otherwise, so a
    /// lost notification only delays the answer.
    ///
    /// - Parameter subscription: made before the job could finish (before its enqueue), with an
    ///   interest in its device: then nothing is read unless the notification cannot answer. `nil`:
    ///   the job may be finished already, so it is read first.
    func waitForJob(id: Int64, userID: String, timeout: Duration, subscription: ChangeSubscription? = nil) async throws -> JobProgress? {
        let subscription = subscription ?? store.notifier.subscribe(.init(jobs: [id]))
        defer { subscription.cancel() }
        let deadline = ContinuousClock.now + timeout
        @Sendable func progress() async throws -> JobProgress? {
            try await store.job(id: id, userID: userID).map(JobProgress.init)
        }
        return try await withGracefulShutdownHandler {
            var job: JobProgress?
            var read = subscription.interest.jobs.contains(id)
            var lastRead = ContinuousClock.now
            while true {
                if read {
                    job = try await progress()
                    if job?.isFinished ?? true { return job }
                    lastRead = .now
                }
                let remaining = ContinuousClock.now.duration(to: deadline)
                if remaining <= .zero { return read ? job : try await progress() }
                // nil: the subscription ended (shutdown); answer with what there is.
                guard let events = await subscription.next(timeout: min(pollInterval, remaining)) else {
                    return read ? job : try await progress()
                }
                var finished = false
                for event in events {
                    switch event {
                    case .jobFinished(let job) where job.id == id && job.userID.sameBytes(as: userID): return .finished(job)
                    case .jobFinishedWithoutResults(id, let device) where device.userID.sameBytes(as: userID): finished = true
                    default: continue
                    }
                }
                // Read on its notification without the results, when notifications may have been
                // lost (the listener reconnected), and once per poll interval whatever else came.
                let mayHaveLost = events.contains { if case .resynchronize = $0 { true } else { false } }
                read = finished || mayHaveLost || lastRead.duration(to: .now) >= pollInterval
            }
        } onGracefulShutdown: {
            subscription.cancel()
        }
    }

    /// One page, not older than the heads this process has heard of: a read replica's page that
    /// stops short of one (a device pulling on an event-stream poke before the standby replayed
    /// the change) is read again from the primary. Without replicas a page is never behind.
    func pull(_ query: PullQuery) async throws -> PullResult {
        let page = try await store.pull(query)
        guard page.isBehind(watcher.heads(of: page.cursor.positions.keys)) else { return page }
        return try await store.pullLatest(query)
    }

    /// The next page that has news (changes, scope changes, force-resync), or an empty page at the deadline.
    ///
    /// The waiter registers the feeds of its cursor with the ``FeedWatcher`` before the first
    /// pull, so nothing committed after that pull's read goes unseen; then it sleeps without
    /// touching the store until a head passes its positions or its scopes change. A wake on
    /// advanced feeds reads only those feeds, through reads shared with every waiter at the same
    /// position; a scopes change runs a whole pull.
    ///
    /// A poll that ends leaves its waiter armed for a while at the cursor it answered (unless its
    /// page changed the scopes, or was one part of several); the device's next poll, with that
    /// cursor, takes it over and waits without reading if nothing passed it meanwhile. So an idle
    /// long-poll, re-polling every `wait`, costs no store call, and neither does a device's poll
    /// right after one that brought it changes.
    ///
    /// Answers the page and, when it is known already, its cursor's text (the answer's to write).
    func waitForPull(_ poll: LongPoll, timeout: Duration) async throws -> (page: PullResult, cursor: String?) {
        let deadline = ContinuousClock.now + timeout
        let (device, adopted, query, registered, waiter) = try start(poll)
        var lingers = false
        defer { if !lingers { waiter.unregister() } }
        return try await withGracefulShutdownHandler {
            var page: PullResult
            // `page.cursor` as text, once known (an adopted page's is the text its poll sent).
            var cursor: String?
            if let adopted {
                page = adopted.1
                cursor = poll.cursor
            } else {
                page = try await store.pull(query)
            }
            while true {
                if let answer = answerAtOnce(page, cursor: cursor, registered: registered, query: query, waiter: waiter, lingers: &lingers) {
                    return answer
                }
                let outcome = await waiter.wait(until: deadline)
                guard case .delivered(let wake) = outcome else {
                    return answerUnwoken(page, cursor: cursor, outcome: outcome, query: query, waiter: waiter, lingers: &lingers)
                }
                let next = query.continuing(at: page.cursor)
                if wake.scopesChanged || wake.resynchronize {
                    // The primary announced it: a read replica may not have replayed it yet.
                    page = try await store.pullLatest(next)
                } else {
                    page = try await continuation(next, after: page, device: device)
                }
                cursor = nil
            }
        } onGracefulShutdown: {
            waiter.close()
        }
    }

    /// `page` and its cursor's text if the poll answers it at once: it has news, or reads feeds
    /// the waiter does not watch (a first page that reads households not registered yet has news
    /// anyway: scopes added). Otherwise arms `waiter` at the page's cursor and returns `nil`.
    /// Out of line, as the two below: their temporaries would otherwise sit in the async frame
    /// of `waitForPull`'s loop, which every waiting long-poll keeps.
    @inline(never)
    private func answerAtOnce(
        _ page: PullResult, cursor: String?, registered: Set<Scope>, query: PullQuery, waiter: LiveWaiter, lingers: inout Bool
    ) -> (page: PullResult, cursor: String?)? {
        let readsWatchedFeeds = Set(page.cursor.positions.keys).isSubset(of: registered)
        guard !page.hasNews, readsWatchedFeeds else {
            var cursor = cursor
            if let quiet = page.quietSuccessor, readsWatchedFeeds {
                let text = cursor ?? page.cursor.encoded()
                lingers = linger(waiter, answered: page, quiet: quiet, query: query, cursor: text)
                cursor = text
            }
            return (page, cursor)
        }
        watcher.arm(waiter, positions: page.cursor.positions, scopesVersion: page.scopesVersion)
        return nil
    }

    /// The answer of a poll whose wait ended without a wake (timed out, closed, cancelled): `page`
    /// as it is. After a timeout its waiter lingers at the page's cursor for the next poll.
    @inline(never)
    private func answerUnwoken(
        _ page: PullResult, cursor: String?, outcome: WakeSignal.Outcome, query: PullQuery, waiter: LiveWaiter, lingers: inout Bool
    ) -> (page: PullResult, cursor: String?) {
        guard case .timedOut = outcome else { return (page, cursor) }
        let text = cursor ?? page.cursor.encoded()
        lingers = watcher.linger(waiter, answered: page, next: query.continuing(at: page.cursor), cursor: text)
        return (page, text)
    }

    /// The poll's device, its adopted waiter's page (if a lingering waiter took it over), its
    /// query, the feeds it waits on, and its waiter. Out of line: its temporaries would otherwise
    /// sit in `waitForPull`'s async frame, which every waiting long-poll keeps.
    @inline(never)
    private func start(_ poll: LongPoll) throws -> (DeviceKey, (LiveWaiter, PullResult, PullQuery)?, PullQuery, Set<Scope>, LiveWaiter) {
        let device = DeviceKey(userID: poll.userID, deviceID: poll.deviceID)
        let adopted = poll.cursor.isEmpty ? nil : try watcher.adopt(poll, retryAfterSeconds: retryAfterSeconds)
        let query = try adopted?.2 ?? poll.query()
        let registered = (query.cursor.map { Set($0.positions.keys) } ?? []).union([.user(query.userID)])
        let waiter = try adopted?.0 ?? watcher.register(device, feeds: registered, retryAfterSeconds: retryAfterSeconds)
        return (device, adopted, query, registered, waiter)
    }

    /// Leaves the waiter of a poll that answered `page`, with news, armed at its cursor (`cursor`
    /// as text) for the device's next poll to take over (answering `quiet` if nothing passed it);
    /// `false` if it cannot (something newer is known already: that poll reads).
    @inline(never)
    private func linger(_ waiter: LiveWaiter, answered page: PullResult, quiet: PullResult, query: PullQuery, cursor: String) -> Bool {
        guard watcher.arm(waiter, positions: page.cursor.positions, scopesVersion: page.scopesVersion, wakeIfBehind: false) else { return false }
        return watcher.linger(waiter, answered: quiet, next: query.continuing(at: page.cursor), cursor: cursor)
    }

    /// The page after `previous` when only feeds advanced: each advanced feed is read once after
    /// its position (shared), the others keep theirs.
    private func continuation(_ query: PullQuery, after previous: PullResult, device: DeviceKey) async throws -> PullResult {
        guard let cursor = query.cursor else { return try await store.pull(query) }
        // The device's jobs that finished while it waited, as the notifications told them, read
        // before the heads: the watcher learns a job's heads no later than the job (one batch
        // at a time, heads first), so the heads below and the reads after them cover its changes.
        let watermark = max(previous.deviceWatermark, watcher.watermark(of: device))
        let (heads, scopesVersion) = watcher.heads(of: cursor.positions.keys, scopesVersionOf: query.userID)
        // The user's households changed since the page it continues (after the wake, before
        // these heads): a full pull plans with the memberships, as every read must. A version
        // the watcher has not learned yet (it learns a user's changes only while the user
        // waits here) is trusted only if the page came from the primary after the waiter
        // registered; a replica's page may predate a removal the watcher never heard of.
        let changed = scopesVersion.map { $0 > previous.scopesVersion } ?? store.readsFromReplicas
        if changed { return try await store.pullLatest(query) }
        let plan = PullPlanner.continuing(query, cursor: cursor, heads: heads, scopesVersion: previous.scopesVersion)
        var pages: [Scope: [FeedChange]] = [:]
        for read in plan.reads {
            guard let head = heads[read.scope], head > read.after else {
                pages[read.scope] = []
                continue
            }
            let key = SharedFeedReads.Key(scope: read.scope, after: read.after, types: query.entityTypes, limit: query.limit)
            let slice = try await watcher.reads.read(key, covering: head)
            // Tombstones up to the floor were purged while the request waited.
            guard read.after >= slice.floor else { throw CursorError.expired(read.scope) }
            // Up to the head the waiter was woken for, as a pull reads up to its context's heads:
            // a change committed while the read waited may follow the member's removal, which
            // the watcher announces before that change's head and this waiter has not seen.
            pages[read.scope] = slice.changes.last.map { $0.sequence <= head } ?? true
                ? slice.changes : Array(slice.changes.prefix { $0.sequence <= head })
        }
        return plan.assemble(pages: pages, deviceWatermark: watermark)
    }
}
