package import SyncGateCore
import SyncGateWire
import Synchronization
import SyncGateRuntime

/// Something that committed and that waiting requests or idle workers care about.
package enum StoreEvent: Sendable, Hashable {
    /// A job finished (`done` or `dead`): a push waiting for it answers from this, without
    /// reading the job back.
    case jobFinished(FinishedJob)
    /// A job of `device` finished, announced without how it ended (its results did not fit in a
    /// notification): a push waiting for it reads the job.
    case jobFinishedWithoutResults(Int64, device: DeviceKey)
    /// A feed committed changes up to `head`.
    case feedAdvanced(Scope, head: Int64)
    /// What a user reads changed other than by a feed advancing — a household joined, left or
    /// archived, or a resync asked for — and their scopes version is now `version`.
    case scopesChanged(userID: String, version: Int64)
    case jobsAvailable
    /// Notifications may have been missed (the listener reconnected), or everyone must resync:
    /// every waiter re-checks.
    case resynchronize

    /// The job and its device, when this is one finishing.
    package var finishedJob: (id: Int64, device: DeviceKey)? {
        switch self {
        case .jobFinished(let job): (job.id, job.device)
        case .jobFinishedWithoutResults(let id, let device): (id, device)
        default: nil
        }
    }
}

/// In-process fan-out of store events to the feed watcher, waiting pushes and idle workers.
///
/// The PostgreSQL driver feeds it from one LISTEN connection per process; the SQLite driver
/// feeds it directly after each commit. Events are latency hints: the feed watcher and idle workers
/// also re-check the database on an interval, so a lost notification delays an answer but never
/// loses it.
package final class ChangeNotifier: Sendable {
    package struct Interest: Sendable, Hashable {
        package var jobs: Set<Int64>
        /// Every job of these devices that finishes (a push subscribes before its job exists).
        package var devices: Set<DeviceKey>
        package var jobsAvailable: Bool
        /// Every feed, scopes and job-finished event (the process's feed watcher).
        package var feeds: Bool

        package init(jobs: Set<Int64> = [], devices: Set<DeviceKey> = [], jobsAvailable: Bool = false, feeds: Bool = false) {
            self.jobs = jobs
            self.devices = devices
            self.jobsAvailable = jobsAvailable
            self.feeds = feeds
        }
    }

    private struct State {
        var nextID = 0
        var subscriptions: [Int: ChangeSubscription] = [:]
        var index = SubscriberIndex()
        var closed = false
    }

    private let state = Mutex(State())
    private let announcedJobs = Atomic<Int>(0)

    package init() {}

    /// How many `jobsAvailable` events were ever published here: one per push enqueued (a
    /// requeue of many jobs counts once). A busy worker reads how many arrived since its last
    /// claim to tell a backlog from a trickle (``Worker``).
    package var jobsAnnounced: Int { announcedJobs.load(ordering: .relaxed) }

    /// Starts collecting events that match `interest`; call ``ChangeSubscription/cancel()`` when done.
    package func subscribe(_ interest: Interest) -> ChangeSubscription {
        state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            let subscription = ChangeSubscription(id: id, interest: interest, notifier: self)
            if state.closed {
                subscription.finish()
            } else {
                state.subscriptions[id] = subscription
                state.index.insert(id, interest)
            }
            return subscription
        }
    }

    package func publish(_ events: [StoreEvent]) {
        guard !events.isEmpty else { return }
        let announced = events.count { $0 == .jobsAvailable }
        if announced > 0 { announcedJobs.add(announced, ordering: .relaxed) }
        let deliveries = state.withLock { state in
            state.index.recipients(of: events).compactMap { id, events in state.subscriptions[id].map { ($0, events) } }
        }
        for (subscription, events) in deliveries { subscription.deliver(events) }
    }

    package func publish(_ event: StoreEvent) {
        publish([event])
    }

    /// Ends every subscription (graceful shutdown): waiters return at once.
    package func close() {
        let subscriptions = state.withLock { state in
            state.closed = true
            defer {
                state.subscriptions = [:]
                state.index.removeAll()
            }
            return Array(state.subscriptions.values)
        }
        subscriptions.forEach { $0.finish() }
    }

    package var isClosed: Bool { state.withLock { $0.closed } }

    package var subscriberCount: Int { state.withLock { $0.subscriptions.count } }

    func remove(_ id: Int) {
        state.withLock { state in
            state.subscriptions[id] = nil
            state.index.remove(id)
        }
    }
}

/// One waiter's view of the notifier: events buffer until it asks for them.
package final class ChangeSubscription: Sendable {
    /// The undelivered events, in order, each once.
    struct Buffer: Sendable {
        var events: [StoreEvent] = []
        /// The events as a set: a busy feed watcher may hold a thousand.
        var seen: Set<StoreEvent> = []

        /// Adds the events not held yet; beyond `limit` the buffer collapses into one `resynchronize`.
        mutating func add(_ new: [StoreEvent], limit: Int) {
            for event in new where seen.insert(event).inserted {
                events.append(event)
            }
            if events.count > limit {
                events = [.resynchronize]
                seen = [.resynchronize]
            }
        }
    }

    /// Beyond this many undelivered events the buffer collapses into one `resynchronize`.
    static let bufferLimit = 1024

    let id: Int
    package let interest: ChangeNotifier.Interest
    private weak let notifier: ChangeNotifier?
    private let mailbox = Mailbox<Buffer>()

    init(id: Int, interest: ChangeNotifier.Interest, notifier: ChangeNotifier) {
        self.id = id
        self.interest = interest
        self.notifier = notifier
    }

    deinit {
        notifier?.remove(id)
    }

    package func cancel() {
        notifier?.remove(id)
        finish()
    }

    package var isFinished: Bool { mailbox.isClosed }

    /// Waits until events arrive or `timeout` passes. Returns the events (empty on timeout), or
    /// `nil` once the subscription is finished (shutdown) or the waiting task is cancelled: a
    /// loop over it ends instead of spinning.
    package func next(timeout: Duration) async -> [StoreEvent]? {
        switch await mailbox.wait(until: .now + timeout) {
        case .delivered(let buffer): buffer.events
        case .timedOut: []
        case .closed: nil
        }
    }

    func deliver(_ events: [StoreEvent]) {
        mailbox.deliver { buffer in
            if buffer == nil { buffer = Buffer() }
            buffer!.add(events, limit: Self.bufferLimit)   // in place: no copy of what is held
        }
    }

    func finish() {
        mailbox.close()
    }
}
