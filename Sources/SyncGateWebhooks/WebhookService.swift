import AsyncHTTPClient
package import Logging
import Metrics
import ServiceLifecycle
import Synchronization
package import SyncGateConcurrency
package import SyncGateStorage
import SyncGateWire

/// Change webhooks in a worker process (docs/webhooks.md): the announcer makes durable messages
/// of committed feed ranges, and the sender renders and posts them, each (subscription, feed) in
/// feed order.
/// It runs beside the worker lanes: the apply writes nothing for it, and a slow or failing
/// receiver holds only its own attempts, bounded in time, size and number.
package final class WebhookService: Service {
    let store: SyncStore
    let configuration: WebhookConfiguration
    let logger: Logger
    let metrics = WebhookMetrics()
    /// Opened once the schema is migrated (`serve` migrates as it starts); `nil`: it is.
    let schemaReady: Latch?

    package init(store: SyncStore, configuration: WebhookConfiguration, schemaReady: Latch? = nil, logger: Logger) {
        self.store = store
        self.configuration = configuration
        self.schemaReady = schemaReady
        self.logger = logger
    }

    /// Attempts in flight in this process, by subscription.
    private let inFlight = Mutex<[String: Int]>([:])
    /// Subscriptions whose last attempt in this process failed (share: one attempt at a time),
    /// and every subscription a claim has taken a message of.
    private let health = Mutex<(failing: Set<String>, known: Set<String>)>(([], []))
    /// Whether a feed advanced since the last announcer pass.
    private let feedsAdvanced = Atomic<Bool>(false)
    /// Whether deliveries were made or a slot freed since the last claim.
    private let claimable = Atomic<Bool>(true)
    /// Messages delivered and not yet recorded: the next claim records them (one statement for
    /// both, instead of one more per message). At most the attempts of one claim's worth.
    private let delivered = Mutex<[WebhookClaim]>([])

    package func run() async throws {
        let client = WebhookSender.makeClient(configuration)
        let sender = WebhookSender(client: client, configuration: configuration)
        // Rung by committed feed changes and by finished attempts; closed at shutdown.
        let bell = ChangeNotifier()
        let doorbell = bell.subscribe(.init(jobsAvailable: true))
        let feeds = store.driver.notifier.subscribe(.init(feeds: true))
        // Shutdown cancels the loop: a database call that waits on a database gone away ends
        // at once, and an attempt cut short is sent again after its lease (at least once).
        try? await cancelWhenGracefulShutdown {
            if let schemaReady = self.schemaReady { try await schemaReady.wait() }
            await withDiscardingTaskGroup { group in
                group.addTask {
                    while let events = await feeds.next(timeout: .seconds(3600)) {
                        guard !events.isEmpty else { continue }
                        // The first event since a pass wakes the loop (to time the next pass);
                        // the rest would only wake it to sleep again, hundreds of times a second.
                        if !self.feedsAdvanced.exchange(true, ordering: .relaxed) { bell.publish(.jobsAvailable) }
                    }
                }
                await self.loop(sender: sender, bell: bell, doorbell: doorbell, group: &group)
                feeds.cancel()
                group.cancelAll()
            }
        }
        // Shutdown cancelled the loop: record what it delivered since its last claim, in a task
        // of its own (not cancelled; bounded by the statement's deadline), so that a restart
        // does not send those messages again.
        let unrecorded = delivered.withLock { $0 }
        if !unrecorded.isEmpty {
            await Task { [store, logger] in
                do {
                    _ = try await store.claimWebhookDeliveries(delivered: unrecorded, limit: 0, perSubscription: 0, excluding: [], leaseMilliseconds: 0)
                } catch {
                    logger.warning("webhook deliveries not recorded; they are sent again after their lease", metadata: ["syncgate.error": "\(error)"])
                }
            }.value
        }
        bell.close()
        await sender.shutdown()
        try? await client.shutdown()
    }

    private func loop(sender: WebhookSender, bell: ChangeNotifier, doorbell: ChangeSubscription, group: inout DiscardingTaskGroup) async {
        let start = ContinuousClock.now
        var housekept = start - configuration.housekeepingInterval
        var announced = start - configuration.pollInterval
        var claimed = start - configuration.pollInterval
        // Until a pass says otherwise. Without subscriptions a process reads one small query per
        // poll interval, whatever the write load.
        var subscriptions = true
        while !Task.isCancelled {
            let now = ContinuousClock.now
            do {
                // Passes are at least `announceInterval` apart, so that a busy feed's changes
                // share a message (each costs its statements whatever it carries); at least one
                // per poll interval finds what no notification announced.
                let sinceAnnounced = announced.duration(to: now)
                if sinceAnnounced >= configuration.pollInterval
                    || (subscriptions && feedsAdvanced.load(ordering: .relaxed) && sinceAnnounced >= configuration.announceInterval)
                {
                    announced = now
                    feedsAdvanced.store(false, ordering: .relaxed)
                    let pass = try await announce()
                    subscriptions = pass.subscriptions > 0
                    if pass.deliveries > 0 { claimable.store(true, ordering: .relaxed) }
                }
                // Claims when there may be something to send: new deliveries, a slot freed, or
                // (once per poll interval) a retry come due.
                if subscriptions, claimable.exchange(false, ordering: .relaxed) || claimed.duration(to: now) >= configuration.pollInterval {
                    claimed = now
                    try await claim(sender: sender, bell: bell, group: &group)
                }
                if housekept.duration(to: now) >= configuration.housekeepingInterval {
                    housekept = now
                    try await housekeeping()
                }
            } catch {
                // The database is away or refused: deliveries wait in it, and the next pass retries.
                if Task.isCancelled { break }
                logger.warning("webhook pass failed", metadata: ["syncgate.error": "\(error)"])
            }
            // Changes came in since the pass: wake for the next one; otherwise sleep until woken.
            let wait = subscriptions && feedsAdvanced.load(ordering: .relaxed)
                ? configuration.announceInterval - announced.duration(to: .now) : configuration.pollInterval
            guard await doorbell.next(timeout: max(.milliseconds(1), min(wait, configuration.pollInterval))) != nil else { break }
        }
    }

    /// One announcer pass: makes messages of new feed ranges until no feed has more (bounded).
    func announce() async throws -> WebhookAnnouncement {
        var after: String?
        var total = WebhookAnnouncement()
        for _ in 0..<1000 {
            let batch = try await store.announceChanges(after: after, feedLimit: configuration.announceFeeds, changeLimit: configuration.announceChanges)
            total.subscriptions = batch.subscriptions
            total.feeds += batch.feeds
            total.changes += batch.changes
            total.deliveries += batch.deliveries
            guard batch.more, let last = batch.lastScope else { break }
            after = last
        }
        return total
    }

    private func claim(sender: WebhookSender, bell: ChangeNotifier, group: inout DiscardingTaskGroup) async throws {
        let failing = health.withLock { $0.failing }
        let next = inFlight.withLock {
            Self.nextClaim(inFlight: $0, concurrency: configuration.concurrency, perSubscription: configuration.perSubscription, failing: failing)
        }
        let recording = delivered.withLock { taken in
            defer { taken = [] }
            return taken
        }
        guard next.limit > 0 || !recording.isEmpty else { return }
        let deliveries: [WebhookDelivery]
        do {
            deliveries = try await store.claimWebhookDeliveries(
                delivered: recording, limit: next.limit, perSubscription: next.perSubscription, excluding: next.excluding,
                leaseMilliseconds: configuration.leaseMilliseconds
            )
        } catch {
            // Recorded by the next claim; until then their feeds' next messages wait.
            delivered.withLock { $0.insert(contentsOf: recording, at: 0) }
            throw error
        }
        start(deliveries, sender: sender, bell: bell, group: &group)
        // Failing subscriptions with nothing in flight: one message each, in a claim of their own.
        guard !failing.isEmpty else { return }
        let known = health.withLock { $0.known }
        let probe = inFlight.withLock { Self.probe(inFlight: $0, concurrency: configuration.concurrency, failing: failing, known: known) }
        guard probe.limit > 0 else { return }
        let retried = try await store.claimWebhookDeliveries(
            delivered: [], limit: probe.limit, perSubscription: 1, excluding: probe.excluding, leaseMilliseconds: configuration.leaseMilliseconds
        )
        start(retried, sender: sender, bell: bell, group: &group)
    }

    private func start(_ deliveries: [WebhookDelivery], sender: WebhookSender, bell: ChangeNotifier, group: inout DiscardingTaskGroup) {
        health.withLock { health in
            for delivery in deliveries { health.known.insert(delivery.subscription.name) }
        }
        for delivery in deliveries {
            inFlight.withLock { $0[delivery.subscription.name, default: 0] += 1 }
            group.addTask {
                await self.deliver(delivery, sender: sender)
                self.inFlight.withLock { counts in
                    counts[delivery.subscription.name, default: 1] -= 1
                    if counts[delivery.subscription.name] == 0 { counts[delivery.subscription.name] = nil }
                }
                self.claimable.store(true, ordering: .relaxed)
                bell.publish(.jobsAvailable)
            }
        }
    }

    /// What the next claim may take, given the attempts in flight by subscription: the free
    /// slots, none of a subscription at its share or `failing`, and of any other at most what
    /// the busiest of them has left, so that no subscription passes its share (the others may
    /// wait a claim). Failing subscriptions are tried again by ``probe(inFlight:concurrency:failing:known:)``.
    package static func nextClaim(
        inFlight: [String: Int], concurrency: Int, perSubscription: Int, failing: Set<String> = []
    ) -> (limit: Int, perSubscription: Int, excluding: [String]) {
        let excluding = Set(inFlight.filter { $0.value >= perSubscription }.map(\.key)).union(failing).sorted()
        let busiest = inFlight.filter { $0.value < perSubscription && !failing.contains($0.key) }.values.max() ?? 0
        return (max(0, concurrency - inFlight.values.reduce(0, +)), perSubscription - busiest, excluding)
    }

    /// The claim that tries failing subscriptions again: one message of each that has no
    /// attempt in flight, within the free slots, every other subscription `known` left out (one
    /// not known yet may be taken once: it is healthy as far as this process knows). So
    /// receivers that time out hold one slot each, not their whole share, and never the others'.
    package static func probe(
        inFlight: [String: Int], concurrency: Int, failing: Set<String>, known: Set<String>
    ) -> (limit: Int, excluding: [String]) {
        let idle = failing.filter { inFlight[$0, default: 0] == 0 }
        let free = max(0, concurrency - inFlight.values.reduce(0, +))
        return (min(idle.count, free), known.union(failing).subtracting(idle).sorted())
    }

    /// One attempt and its record: a delivered message is recorded by the next claim, a failed
    /// one at once. A record that fails to commit leaves the delivery claimed until its lease
    /// ends; it is then sent again under the same webhook-id (at least once).
    func deliver(_ delivery: WebhookDelivery, sender: WebhookSender) async {
        let now = store.clock.wallNow().millisecondsSinceEpoch
        let outcome: WebhookAttemptOutcome
        guard let message = WebhookPayload.render(delivery) else {
            // Its range holds nothing the subscription wants: done without a request.
            delivered.withLock { $0.append(delivery.claim) }
            return
        }
        let result = await sender.attempt(delivery, body: message.body, timestamp: now / 1000)
        health.withLock { health in
            if case .delivered = result { health.failing.remove(delivery.subscription.name) } else { health.failing.insert(delivery.subscription.name) }
        }
        switch result {
        case .delivered:
            metrics.delivered(changes: message.changes, committedAt: delivery.committedAt, now: store.clock.wallNow().millisecondsSinceEpoch)
            delivered.withLock { $0.append(delivery.claim) }
            return
        case .failed where Task.isCancelled:
            // Cut short by the worker's shutdown: not the receiver's failure. Nothing is recorded;
            // the message is sent again after its lease.
            return
        case .failed(let error):
            // From when the attempt ended: a 10 s timeout must not eat the first 5 s wait.
            let ended = store.clock.wallNow().millisecondsSinceEpoch
            switch configuration.retry.afterFailure(attempts: delivery.attempts, error: error, now: ended, unit: Double.random(in: 0..<1)) {
            case .retry(let at): outcome = .retry(at: at, error: error)
            case .pause: outcome = .pause(error: "\(delivery.attempts) attempts failed; the last: \(error)")
            }
        case .unsendable(let error):
            outcome = .pause(error: error)
        }
        switch outcome {
        case .delivered: break
        case .retry(_, let error):
            metrics.attempt("retry")
            logger.info("webhook delivery failed; will retry", metadata: [
                "syncgate.webhook": "\(delivery.subscription.name)", "syncgate.delivery": "\(delivery.id)",
                "syncgate.attempts": "\(delivery.attempts)", "syncgate.error": "\(error)",
            ])
        case .pause(let error):
            metrics.attempt("paused")
            logger.warning("webhook subscription paused; its deliveries wait for resume or replay", metadata: [
                "syncgate.webhook": "\(delivery.subscription.name)", "syncgate.delivery": "\(delivery.id)", "syncgate.error": "\(error)",
            ])
        }
        await finish(delivery, outcome)
    }

    private func finish(_ delivery: WebhookDelivery, _ outcome: WebhookAttemptOutcome) async {
        do {
            try await store.finishWebhookDelivery(delivery.claim, outcome: outcome)
        } catch {
            logger.warning("webhook delivery not recorded; it is sent again after its lease", metadata: [
                "syncgate.delivery": "\(delivery.id)", "syncgate.error": "\(error)",
            ])
        }
    }

    /// Deletes delivered deliveries past the replay window; samples the backlog.
    func housekeeping() async throws {
        _ = try await store.deleteDeliveredWebhooks(olderThanMilliseconds: configuration.replayWindowMilliseconds)
        metrics.pending.record(try await store.pendingWebhookDeliveries())
    }
}

/// The webhook series (see ``MetricName``).
struct WebhookMetrics: Sendable {
    let attempts = MetricHandles<String, Counter> { outcome in
        Counter(label: MetricName.webhookDeliveries, dimensions: [("outcome", outcome)])
    }
    let changes = Counter(label: MetricName.webhookChanges)
    let lag = Metrics.Timer(label: MetricName.webhookLag)
    let pending = Gauge(label: MetricName.webhookPending)

    func attempt(_ outcome: String) { attempts[outcome].increment() }

    func delivered(changes count: Int, committedAt: Int64, now: Int64) {
        attempt("delivered")
        changes.increment(by: count)
        lag.recordMilliseconds(max(0, now - committedAt))
    }
}
