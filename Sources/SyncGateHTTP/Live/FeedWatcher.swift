package import Logging
import ServiceLifecycle
import Synchronization
package import SyncGateCore
package import SyncGateWire
package import SyncGateStorage
import SyncGateRuntime
package import SyncGateConcurrency

/// The live waiters of one front process — long-polls and event streams — woken from memory.
///
/// It keeps a ``WatchTable`` of the heads and scopes versions its waiters read, current from the
/// store's notifier (one LISTEN per process, or in-process signals), and wakes a waiter only when
/// a head passes its position or its scopes change. An idle waiter costs no store call: the
/// safety net for lost notifications is one ``FrontStore/watchState(feeds:users:)`` read per
/// `interval` for the whole process, and another after the listener reconnects.
package final class FeedWatcher: Service, Sendable {
    package typealias WaiterID = WatchTable.WaiterID

    let store: any FrontStore
    let interval: Duration
    let logger: Logger
    let reads: SharedFeedReads
    private let subscription: ChangeSubscription
    private let state: Mutex<State>
    /// Opened when the schema is migrated, for a watcher made to wait for it: `serve` migrates
    /// while its services start, and a first read of a database being created fails (a fresh
    /// `serve` logged "no such table: feeds" before its migrations).
    private let schemaReady: Latch?

    private struct State {
        var table: WatchTable
        var signals: [WaiterID: WakeSignal] = [:]
        /// Long-polls that answered with nothing new, by the poll that would follow them.
        var lingering: [LongPoll: Lingering] = [:]
        var lingeringQueries: [WaiterID: LongPoll] = [:]
        var closed = false

        /// Removes lingering waiters; returns them, to be released outside the lock (a waiter's
        /// `deinit` takes it).
        mutating func dropLingering(_ ids: some Sequence<WaiterID>) -> [LiveWaiter] {
            ids.compactMap { id in
                guard let query = lingeringQueries.removeValue(forKey: id) else { return nil }
                table.remove(id)
                signals[id] = nil
                return lingering.removeValue(forKey: query)?.waiter
            }
        }
    }

    struct Lingering {
        var waiter: LiveWaiter
        var page: PullResult
        /// The poll that follows, decoded.
        var next: PullQuery
    }

    /// How long a long-poll that answered with nothing new stays armed for the device's next poll.
    static let lingerFor: Duration = .seconds(10)

    /// - Parameters:
    ///   - interval: how often the safety net reads every watched head.
    ///   - limits: caps on live connections, per user and for the process.
    ///   - schemaReady: read nothing until it opens (for a process that migrates while it starts;
    ///     no request arrives before then).
    package init(store: any FrontStore, interval: Duration, limits: WatchTable.Limits, schemaReady: Latch? = nil, logger: Logger) {
        self.store = store
        self.schemaReady = schemaReady
        self.interval = interval
        self.logger = logger
        self.reads = SharedFeedReads(store: store)
        self.state = Mutex(State(table: WatchTable(limits: limits)))
        // Subscribed now, not when the service starts: requests may arrive first.
        self.subscription = store.notifier.subscribe(.init(feeds: true))
    }

    package func run() async throws {
        defer { subscription.cancel() }
        await cancelWhenGracefulShutdown {
            // Ends when the schema is ready, or at cancellation (then `watch` returns at once).
            try? await self.schemaReady?.wait()
            await self.watch()
        }
    }

    /// Applies events as they come, and reads the table's heads once per interval (first at once,
    /// which learns the resync epoch) and whenever notifications may have been lost.
    private func watch() async {
        var due = ContinuousClock.now
        while !Task.isCancelled {
            var lost = false
            let remaining = ContinuousClock.now.duration(to: due)
            if remaining > .zero {
                guard let events = await subscription.next(timeout: remaining) else { return }
                lost = apply(events)
                if !lost, ContinuousClock.now < due { continue }
            }
            await check(afterLoss: lost)
            due = ContinuousClock.now + interval
        }
    }

    /// Wakes the waiters the events concern; `true` when one says notifications may have been lost.
    private func apply(_ events: [StoreEvent]) -> Bool {
        var lost = false
        var observed = WatchState()
        var finished: [(Int64, DeviceKey)] = []
        for event in events {
            switch event {
            case .feedAdvanced(let scope, let head): observed.heads[scope] = max(observed.heads[scope] ?? head, head)
            case .scopesChanged(let userID, let version): observed.scopesVersions[ExactKey(userID)] = max(observed.scopesVersions[ExactKey(userID)] ?? version, version)
            case .jobFinished, .jobFinishedWithoutResults: if let job = event.finishedJob { finished.append(job) }
            case .resynchronize: lost = true
            case .jobsAvailable: break
            }
        }
        let woken = state.withLock { state -> [(WakeSignal, WatchTable.Wake)] in
            for (id, device) in finished { state.table.jobFinished(id, device: device) }
            return Self.observe(observed, in: &state)
        }
        for (signal, wake) in woken { signal.wake(wake) }
        return lost
    }

    /// The safety net: one read of every watched head and version.
    private func check(afterLoss: Bool) async {
        let (feeds, users) = state.withLock { ($0.table.watchedFeeds, $0.table.watchedUsers) }
        do {
            let observed = try await store.watchState(feeds: feeds, users: users)
            let woken = state.withLock { state in Self.observe(observed, in: &state) }
            for (signal, wake) in woken { signal.wake(wake) }
            if afterLoss {
                // The listener reconnected (notifications may have been lost) or an operator
                // asked everyone to resync; at start-up nobody waits yet.
                logger.log(
                    level: feeds.isEmpty ? .debug : .warning,
                    "re-read the heads of every watched feed after a resynchronize",
                    metadata: ["syncgate.feeds": "\(feeds.count)", "syncgate.users": "\(users.count)", "syncgate.woken": "\(woken.count)"]
                )
            }
        } catch {
            logger.warning("the live waiters' safety-net read failed; retrying next interval", metadata: ["syncgate.error": "\(error)"])
        }
        reads.prune(olderThan: max(interval, .seconds(1)))
        let expired = state.withLock { state in
            state.dropLingering(state.table.staleLingering(before: .now - Self.lingerFor))
        }
        withExtendedLifetime(expired) {}
    }

    /// Applies what was observed; returns the signals of the woken waiters that a connection holds.
    /// Woken lingering waiters stay in the table, unarmed (so no poll adopts them), until the next
    /// check drops them.
    private static func observe(_ observed: WatchState, in state: inout State) -> [(WakeSignal, WatchTable.Wake)] {
        state.table.observe(observed).compactMap { id, wake in
            guard state.lingeringQueries[id] == nil else { return nil }
            return state.signals[id].map { ($0, wake) }
        }
    }

    // MARK: Waiters

    /// Registers a live connection of `device` reading `feeds`, before it reads the store.
    /// Over a cap it is refused with `429 RATE_LIMITED`.
    package func register(_ device: DeviceKey, feeds: Set<Scope>, retryAfterSeconds: Int) throws(ProtocolError) -> LiveWaiter {
        let signal = WakeSignal()
        let registered = state.withLock { state -> Result<WaiterID, WatchTable.Refusal> in
            if state.closed { signal.close() }
            do throws(WatchTable.Refusal) {
                let id = try state.table.register(device: device, feeds: feeds)
                state.signals[id] = signal
                return .success(id)
            } catch {
                return .failure(error)
            }
        }
        switch registered {
        case .success(let id):
            return LiveWaiter(id: id, device: device, signal: signal, watcher: self)
        case .failure(let refusal):
            throw Self.error(refusal, retryAfterSeconds: retryAfterSeconds)
        }
    }

    private static func error(_ refusal: WatchTable.Refusal, retryAfterSeconds: Int) -> ProtocolError {
        switch refusal {
        case .userLimit(let limit):
            ProtocolError(.rateLimited, "this user already holds \(limit) live connections (long-polls and event streams); close one or retry later", retryAfterSeconds: retryAfterSeconds)
        case .processLimit(let limit):
            ProtocolError(.rateLimited, "this server holds its maximum of \(limit) live connections; retry later", retryAfterSeconds: retryAfterSeconds)
        }
    }

    /// A long-poll answered `page`, with nothing new, at the deadline: its waiter stays armed
    /// (lingers) for ``lingerFor``, for the device's next poll, `next`, to ``adopt(_:retryAfterSeconds:)``.
    /// `false` if it cannot linger (then unregister it).
    ///
    /// - Parameter cursor: `next`'s cursor as the answer writes it (the text the next poll sends).
    func linger(_ waiter: LiveWaiter, answered page: PullResult, next: PullQuery, cursor: String) -> Bool {
        let poll = LongPoll(userID: next.userID, deviceID: next.deviceID, cursor: cursor, limit: next.limit, entityTypes: next.entityTypes)
        let (lingers, replaced) = state.withLock { state -> (Bool, [LiveWaiter]) in
            guard !state.closed, state.table.linger(waiter.id, since: .now) else { return (false, []) }
            // The same poll answered twice (one device, two identical long-polls): keep the newer.
            let replaced = state.lingering[poll].map { state.dropLingering([$0.waiter.id]) } ?? []
            state.lingering[poll] = Lingering(waiter: waiter, page: page, next: next)
            state.lingeringQueries[waiter.id] = poll
            return (true, replaced)
        }
        withExtendedLifetime(replaced) {}
        return lingers
    }

    /// The lingering waiter of the poll that `poll` follows, the page it answered (with the
    /// device's newest finished job) and `poll` decoded, if nothing passed it since: the poll may
    /// wait on it without reading or decoding its cursor. `nil` if there is none (the poll
    /// registers and reads).
    func adopt(_ poll: LongPoll, retryAfterSeconds: Int) throws(ProtocolError) -> (LiveWaiter, PullResult, PullQuery)? {
        let (adopted, dropped, refusal) = state.withLock { state -> ((LiveWaiter, PullResult, PullQuery)?, [LiveWaiter], WatchTable.Refusal?) in
            guard let entry = state.lingering[poll] else { return (nil, [], nil) }
            do throws(WatchTable.Refusal) {
                guard try state.table.adopt(entry.waiter.id) else { return (nil, state.dropLingering([entry.waiter.id]), nil) }
            } catch {
                return (nil, state.dropLingering([entry.waiter.id]), error)
            }
            state.lingering[poll] = nil
            state.lingeringQueries[entry.waiter.id] = nil
            var page = entry.page
            page.deviceWatermark = max(page.deviceWatermark, state.table.watermark(of: entry.waiter.device))
            return ((entry.waiter, page, entry.next), [], nil)
        }
        withExtendedLifetime(dropped) {}
        if let refusal { throw Self.error(refusal, retryAfterSeconds: retryAfterSeconds) }
        return adopted
    }

    /// Arms the waiter at what it read; `false` if something newer is known already (then it is
    /// woken, or with `wakeIfBehind: false` left unarmed).
    @discardableResult
    func arm(_ waiter: LiveWaiter, positions: [Scope: Int64], scopesVersion: Int64, wakeIfBehind: Bool = true) -> Bool {
        guard let wake = state.withLock({ $0.table.arm(waiter.id, positions: positions, scopesVersion: scopesVersion) }) else { return true }
        if wakeIfBehind { waiter.signal.wake(wake) }
        return false
    }

    func watch(_ waiter: LiveWaiter, feeds: Set<Scope>) {
        state.withLock { $0.table.watch(waiter.id, feeds: feeds) }
    }

    func remove(_ id: WaiterID) {
        state.withLock { state in
            state.table.remove(id)
            state.signals[id] = nil
        }
    }

    /// The heads the watcher knows of these feeds (of those it watches).
    package func heads(of scopes: some Sequence<Scope>) -> [Scope: Int64] {
        state.withLock { $0.table.heads(of: scopes) }
    }

    /// The heads of `scopes` and the scopes version of `userID`, read together: a head the watcher
    /// learned of a change made after a membership change comes with that change's version (a
    /// commit announces its membership changes before its heads).
    func heads(of scopes: some Sequence<Scope>, scopesVersionOf userID: String) -> (heads: [Scope: Int64], scopesVersion: Int64?) {
        state.withLock { ($0.table.heads(of: scopes), $0.table.scopesVersion(of: userID)) }
    }

    func watermark(of device: DeviceKey) -> Int64 {
        state.withLock { $0.table.watermark(of: device) }
    }

    /// Live connections registered now.
    package var waiterCount: Int { state.withLock { $0.table.waiterCount } }

    /// Starts tracking which devices hold a live connection here (for push nudges); returns every
    /// device that holds one now.
    package func trackPresence() -> [DeviceKey] {
        state.withLock { state in
            state.table.trackPresence()
            _ = state.table.takePresenceChanges()
            return state.table.presentDevices
        }
    }

    /// Devices that opened their first or closed their last live connection here since the last call.
    package func takePresenceChanges() -> (appeared: [DeviceKey], left: [DeviceKey]) {
        state.withLock { $0.table.takePresenceChanges() }
    }

    /// Live connections asleep now, armed at positions they have read up to.
    package var armedCount: Int { state.withLock { $0.table.armedCount } }

    /// Ends every wait at once (shutdown of a server whose requests are not drained by a
    /// graceful-shutdown handler).
    package func close() {
        let (signals, lingering) = state.withLock { state in
            state.closed = true
            return (Array(state.signals.values), state.dropLingering(Array(state.lingeringQueries.keys)))
        }
        signals.forEach { $0.close() }
        withExtendedLifetime(lingering) {}
    }

    /// Long-polls that answered with nothing new and stay armed for their device's next poll.
    package var lingeringCount: Int { state.withLock { $0.table.lingeringWaiterCount } }
}

/// A pull as the device sent it, its cursor the text it holds ("" for none). A re-poll sends back
/// the text its answer carried, so a lingering waiter is found by it without decoding the cursor
/// (a decoded cursor is also dearer to hash: two dictionaries). Ids and cursor compare by bytes:
/// NFC and NFD "josé" are two users, and one must not adopt the other's waiter.
struct LongPoll: Sendable, Hashable {
    var userID: String
    var deviceID: String
    var cursor: String
    var limit: Int
    var entityTypes: Set<String>?

    static func == (lhs: LongPoll, rhs: LongPoll) -> Bool {
        lhs.userID.sameBytes(as: rhs.userID) && lhs.deviceID.sameBytes(as: rhs.deviceID) && lhs.cursor.sameBytes(as: rhs.cursor)
            && lhs.limit == rhs.limit && lhs.entityTypes == rhs.entityTypes
    }

    func hash(into hasher: inout Hasher) {
        userID.hashBytes(into: &hasher)
        deviceID.hashBytes(into: &hasher)
        cursor.hashBytes(into: &hasher)
        hasher.combine(limit)
        hasher.combine(entityTypes)
    }

    /// The query, its cursor decoded and checked to be the user's.
    func query() throws(CursorError) -> PullQuery {
        PullQuery(
            userID: userID, deviceID: deviceID, cursor: cursor.isEmpty ? nil : try SyncCursor.decode(cursor, expectedUserID: userID),
            limit: limit, entityTypes: entityTypes
        )
    }
}

/// One registered live connection. Dropping it unregisters it, so a response body that never
/// runs cannot leak a registration.
package final class LiveWaiter: Sendable {
    let id: FeedWatcher.WaiterID
    let device: DeviceKey
    let signal: WakeSignal
    let watcher: FeedWatcher

    init(id: FeedWatcher.WaiterID, device: DeviceKey, signal: WakeSignal, watcher: FeedWatcher) {
        self.id = id
        self.device = device
        self.signal = signal
        self.watcher = watcher
    }

    deinit {
        watcher.remove(id)
    }

    /// Ends the registration (idempotent).
    func unregister() {
        watcher.remove(id)
    }

    /// Waits for a wake-up until `deadline`.
    func wait(until deadline: ContinuousClock.Instant) async -> WakeSignal.Outcome {
        await signal.wait(until: deadline)
    }

    /// Ends the wait now (graceful shutdown).
    func close() {
        signal.close()
    }
}

/// Where a live connection waits: wake-ups merge until it takes them.
typealias WakeSignal = Mailbox<WatchTable.Wake>

extension Mailbox where Pending == WatchTable.Wake {
    func wake(_ wake: WatchTable.Wake) {
        deliver { pending in
            if pending == nil { pending = wake } else { pending!.merge(wake) }
        }
    }
}
