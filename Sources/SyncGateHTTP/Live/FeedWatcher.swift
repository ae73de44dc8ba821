public import Logging
public import ServiceLifecycle
import Synchronization
public import SyncGateCore
public import SyncGateStorage

/// The live waiters of one front process — long-polls and event streams — woken from memory.
///
/// It keeps a ``WatchTable`` of the heads and scopes versions its waiters read, current from the
/// store's notifier (one LISTEN per process, or in-process signals), and wakes a waiter only when
/// a head passes its position or its scopes change. An idle waiter costs no store call: the
/// safety net for lost notifications is one ``FrontStore/watchState(feeds:users:)`` read per
/// `interval` for the whole process, and another after the listener reconnects.
public final class FeedWatcher: Service, Sendable {
    public typealias WaiterID = WatchTable.WaiterID

    let store: any FrontStore
    let interval: Duration
    let logger: Logger
    let reads: SharedFeedReads
    private let subscription: ChangeSubscription
    private let state: Mutex<State>

    private struct State {
        var table: WatchTable
        var signals: [WaiterID: WakeSignal] = [:]
        var closed = false
    }

    /// - Parameters:
    ///   - interval: how often the safety net reads every watched head.
    ///   - limits: caps on live connections, per user and for the process.
    public init(store: any FrontStore, interval: Duration, limits: WatchTable.Limits, logger: Logger) {
        self.store = store
        self.interval = interval
        self.logger = logger
        self.reads = SharedFeedReads(store: store)
        self.state = Mutex(State(table: WatchTable(limits: limits)))
        // Subscribed now, not when the service starts: requests may arrive first.
        self.subscription = store.notifier.subscribe(.init(feeds: true))
    }

    public func run() async throws {
        defer { subscription.cancel() }
        await cancelWhenGracefulShutdown {
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
            case .scopesChanged(let userID, let version): observed.scopesVersions[userID] = max(observed.scopesVersions[userID] ?? version, version)
            case .jobFinished(let id, let device): finished.append((id, device))
            case .resynchronize: lost = true
            case .jobsAvailable: break
            }
        }
        let woken = state.withLock { state -> [(WakeSignal, WatchTable.Wake)] in
            for (id, device) in finished { state.table.jobFinished(id, device: device) }
            return Self.signals(for: state.table.observe(observed), in: state)
        }
        for (signal, wake) in woken { signal.wake(wake) }
        return lost
    }

    /// The safety net: one read of every watched head and version.
    private func check(afterLoss: Bool) async {
        let (feeds, users) = state.withLock { ($0.table.watchedFeeds, $0.table.watchedUsers) }
        do {
            let observed = try await store.watchState(feeds: feeds, users: users)
            let woken = state.withLock { state in Self.signals(for: state.table.observe(observed), in: state) }
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
    }

    private static func signals(for wakes: [WaiterID: WatchTable.Wake], in state: State) -> [(WakeSignal, WatchTable.Wake)] {
        wakes.compactMap { id, wake in state.signals[id].map { ($0, wake) } }
    }

    // MARK: Waiters

    /// Registers a live connection of `device` reading `feeds`, before it reads the store.
    /// Over a cap it is refused with `429 RATE_LIMITED`.
    public func register(_ device: DeviceKey, feeds: Set<Scope>, retryAfterSeconds: Int) throws(ProtocolError) -> LiveWaiter {
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
        case .failure(.userLimit(let limit)):
            throw ProtocolError(.rateLimited, "this user already holds \(limit) live connections (long-polls and event streams); close one or retry later", retryAfterSeconds: retryAfterSeconds)
        case .failure(.processLimit(let limit)):
            throw ProtocolError(.rateLimited, "this server holds its maximum of \(limit) live connections; retry later", retryAfterSeconds: retryAfterSeconds)
        }
    }

    func arm(_ waiter: LiveWaiter, positions: [Scope: Int64], scopesVersion: Int64) {
        if let wake = state.withLock({ $0.table.arm(waiter.id, positions: positions, scopesVersion: scopesVersion) }) {
            waiter.signal.wake(wake)
        }
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

    func heads(of scopes: some Sequence<Scope>) -> [Scope: Int64] {
        state.withLock { $0.table.heads(of: scopes) }
    }

    func watermark(of device: DeviceKey) -> Int64 {
        state.withLock { $0.table.watermark(of: device) }
    }

    /// Live connections registered now.
    public var waiterCount: Int { state.withLock { $0.table.waiterCount } }

    /// Live connections asleep now, armed at positions they have read up to.
    public var armedCount: Int { state.withLock { $0.table.armedCount } }

    /// Ends every wait at once (shutdown of a server whose requests are not drained by a
    /// graceful-shutdown handler).
    public func close() {
        let signals = state.withLock { state in
            state.closed = true
            return Array(state.signals.values)
        }
        signals.forEach { $0.close() }
    }
}

/// One registered live connection. Dropping it unregisters it, so a response body that never
/// runs cannot leak a registration.
public final class LiveWaiter: Sendable {
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

/// Where a waiter sleeps: wake-ups accumulate until it takes them.
final class WakeSignal: Sendable {
    enum Outcome: Sendable {
        case woken(WatchTable.Wake)
        case timedOut
        case closed
    }

    private struct State {
        var pending: WatchTable.Wake?
        var continuation: CheckedContinuation<Void, Never>?
        var closed = false
    }

    private let state = Mutex(State())

    func wake(_ wake: WatchTable.Wake) {
        let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
            var pending = state.pending ?? .init()
            pending.merge(wake)
            state.pending = pending
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume()
    }

    func close() {
        let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.closed = true
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume()
    }

    func wait(until deadline: ContinuousClock.Instant) async -> Outcome {
        if let outcome = take() { return outcome }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.sleep() }
            group.addTask { try? await Task.sleep(until: deadline, clock: .continuous) }
            await group.next()
            group.cancelAll()
        }
        return take() ?? .timedOut
    }

    private func take() -> Outcome? {
        state.withLock { state in
            if state.closed { return .closed }
            guard let wake = state.pending else { return nil }
            state.pending = nil
            return .woken(wake)
        }
    }

    private func sleep() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.pending != nil || state.closed || Task.isCancelled { return true }
                    state.continuation = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
                defer { state.continuation = nil }
                return state.continuation
            }
            continuation?.resume()
        }
    }
}
