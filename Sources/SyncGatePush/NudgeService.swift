import AsyncHTTPClient
package import Logging
import Metrics
import ServiceLifecycle
import Synchronization
package import SyncGateConcurrency
package import SyncGateCore
package import SyncGateStorage
package import SyncGateWire

/// The nudger of a worker process (docs/push.md): it adds the feeds that advanced to the pending
/// set of each registered device that reads them, and sends each device at most one silent push
/// per interval, unless the device holds a live connection. Several processes share the work
/// through the database. The apply writes nothing for it but each change's writer; a slow or
/// failing provider holds only its own requests, bounded in time, number and retries.
package final class NudgeService: Service {
    let store: SyncStore
    let configuration: PushConfiguration
    let logger: Logger
    let metrics = NudgeMetrics()
    /// Opened once the schema is migrated (`serve` migrates as it starts); `nil`: it is.
    let schemaReady: Latch?

    /// Feeds notified as advanced since the last pass; `all`: look at every tracked feed.
    private let advanced = Mutex<(scopes: Set<Scope>, all: Bool)>(([], true))
    /// More notified feeds than this are not kept one by one: the next pass looks at all.
    static let advancedLimit = 10_000
    /// Attempts in flight in this process, by provider.
    private let inFlight = Mutex<[PushRegistration.Provider: Int]>([:])
    /// Until when (milliseconds since the epoch, the store's clock) each provider that answered
    /// `providerBusy` is not sent to by this process.
    private let holds = Mutex<[PushRegistration.Provider: Int64]>([:])
    /// Whether a pass made nudges due or an attempt ended since the last claim.
    private let claimable = Atomic<Bool>(true)

    package init(store: SyncStore, configuration: PushConfiguration, schemaReady: Latch? = nil, logger: Logger) {
        self.store = store
        self.configuration = configuration
        self.schemaReady = schemaReady
        self.logger = logger
    }

    package func run() async throws {
        let http = PushHTTPClient.make(timeout: configuration.timeout, tls: configuration.tls)
        let senders = await Senders(configuration: configuration, http: http)
        let bell = ChangeNotifier()
        let doorbell = bell.subscribe(.init(jobsAvailable: true))
        let events = store.driver.notifier.subscribe(.init(feeds: true))
        try? await cancelWhenGracefulShutdown {
            if let schemaReady = self.schemaReady { try await schemaReady.wait() }
            await withDiscardingTaskGroup { group in
                group.addTask {
                    while let batch = await events.next(timeout: .seconds(3600)) {
                        guard self.note(batch) else { continue }
                        bell.publish(.jobsAvailable)
                    }
                }
                await self.loop(senders: senders, bell: bell, doorbell: doorbell, group: &group)
                events.cancel()
                group.cancelAll()
            }
        }
        bell.close()
        try? await http.shutdown()
    }

    /// Records what `batch` says advanced; whether the loop must be woken for it: only when a
    /// pass had nothing to look at before (otherwise the loop is already waiting for the next
    /// pass's time, and waking it at every commit only cost CPU on the apply's machine).
    package func note(_ batch: [StoreEvent]) -> Bool {
        advanced.withLock { advanced in
            let idle = !advanced.all && advanced.scopes.isEmpty
            var noted = false
            for event in batch {
                switch event {
                case .feedAdvanced(let scope, _):
                    if !advanced.all { advanced.scopes.insert(scope) }
                    noted = true
                // Missed notifications, or a household joined or left: look at every feed.
                case .resynchronize, .scopesChanged:
                    advanced.all = true
                    noted = true
                default:
                    continue
                }
            }
            if advanced.scopes.count > Self.advancedLimit {
                advanced.scopes = []
                advanced.all = true
            }
            if advanced.all { advanced.scopes = [] }
            return noted && idle
        }
    }

    /// What the next pass looks at, taken: the feeds noted since the last, or all of them.
    package func takeAdvanced() -> (scopes: Set<Scope>, all: Bool) {
        advanced.withLock { advanced in
            defer { advanced = ([], false) }
            return (advanced.scopes, advanced.all)
        }
    }

    private func loop(senders: Senders, bell: ChangeNotifier, doorbell: ChangeSubscription, group: inout DiscardingTaskGroup) async {
        let start = ContinuousClock.now
        var swept = start - configuration.sweepInterval
        var marked = start - configuration.markInterval
        var claimed = start - configuration.pollInterval
        while !Task.isCancelled {
            let now = ContinuousClock.now
            do {
                if swept.duration(to: now) >= configuration.sweepInterval {
                    advanced.withLock { $0.all = true }
                    swept = now
                    try await housekeeping()
                }
                // Passes at least `markInterval` apart, so that notified feeds share one.
                if marked.duration(to: now) >= configuration.markInterval {
                    let (scopes, all) = takeAdvanced()
                    if all || !scopes.isEmpty {
                        marked = now
                        if all { _ = try await store.trackPushFeeds() }
                        if try await mark(all ? nil : scopes.sorted()) > 0 { claimable.store(true, ordering: .relaxed) }
                    }
                }
                if claimable.exchange(false, ordering: .relaxed) || claimed.duration(to: now) >= configuration.pollInterval {
                    claimed = now
                    try await claim(senders: senders, bell: bell, group: &group)
                }
            } catch {
                // The database is away or refused: pending nudges wait in it, and the next pass retries.
                if Task.isCancelled { break }
                advanced.withLock { $0.all = true }
                logger.warning("nudge pass failed", metadata: ["syncgate.error": "\(error)"])
            }
            let pendingMark = advanced.withLock { $0.all || !$0.scopes.isEmpty }
            let wait = pendingMark ? configuration.markInterval - marked.duration(to: .now) : configuration.pollInterval
            guard await doorbell.next(timeout: max(.milliseconds(1), min(wait, configuration.pollInterval))) != nil else { break }
        }
    }

    /// Marks until no taken feed is left (bounded); returns how many devices got something pending.
    func mark(_ scopes: [Scope]?) async throws -> Int {
        var devices = 0
        for _ in 0..<100 {
            let pass = try await store.markNudges(scopes: scopes, feedLimit: configuration.feedLimit, intervalMilliseconds: configuration.intervalMilliseconds)
            devices += pass.devices
            guard pass.more else { break }
        }
        return devices
    }

    private func claim(senders: Senders, bell: ChangeNotifier, group: inout DiscardingTaskGroup) async throws {
        // One claim over every provider with room, of as many as none of them can pass its share
        // with; if it took all of those, more may be due: each provider then on its own, up to
        // its share.
        let now = store.clock.wallNow().millisecondsSinceEpoch
        let held = holds.withLock { holds in Set(holds.filter { $0.value > now }.keys) }
        let first = inFlight.withLock { Self.nextClaim(inFlight: $0, concurrency: configuration.concurrency, held: held) }
        guard first.limit > 0 else { return }
        guard try await take(first.limit, of: first.providers, senders: senders, bell: bell, group: &group) == first.limit else { return }
        for provider in PushRegistration.Provider.allCases where !held.contains(provider) {
            let limit = inFlight.withLock { Self.room(of: provider, inFlight: $0, concurrency: configuration.concurrency) }
            if limit > 0 { _ = try await take(limit, of: [provider], senders: senders, bell: bell, group: &group) }
        }
    }

    /// One claim, and a task for each nudge it took; how many it took.
    private func take(
        _ limit: Int, of providers: Set<PushRegistration.Provider>, senders: Senders, bell: ChangeNotifier, group: inout DiscardingTaskGroup
    ) async throws -> Int {
        let claim = try await store.claimNudges(
            limit: limit, providers: providers, leaseMilliseconds: configuration.effectiveLeaseMilliseconds,
            recheckMilliseconds: configuration.liveRecheckMilliseconds
        )
        if claim.present > 0 { metrics.outcome(provider: "any", "live", count: claim.present) }
        // Rows held or dropped for a live connection took the claim's places: claim again at
        // once rather than a poll interval later.
        if claim.held + claim.present > 0 { claimable.store(true, ordering: .relaxed) }
        for nudge in claim.nudges {
            let provider = nudge.registration.provider
            inFlight.withLock { $0[provider, default: 0] += 1 }
            group.addTask {
                await self.send(nudge, senders: senders)
                self.inFlight.withLock { $0[provider, default: 1] -= 1 }
                self.claimable.store(true, ordering: .relaxed)
                bell.publish(.jobsAvailable)
            }
        }
        return claim.nudges.count
    }

    /// What the next claim may take, given the attempts in flight by provider: of the free slots,
    /// no more than any provider it may take has left of its share (three quarters of them), so
    /// that a provider that does not answer, each attempt held to its timeout, leaves the other
    /// room; a provider at its share, or `held` (it asked to be left alone for now), is not taken.
    package static func nextClaim(
        inFlight: [PushRegistration.Provider: Int], concurrency: Int, held: Set<PushRegistration.Provider> = []
    ) -> (limit: Int, providers: Set<PushRegistration.Provider>) {
        let open = Set(PushRegistration.Provider.allCases.filter { !held.contains($0) && room(of: $0, inFlight: inFlight, concurrency: concurrency) > 0 })
        return (open.map { room(of: $0, inFlight: inFlight, concurrency: concurrency) }.min() ?? 0, open)
    }

    /// How many more attempts of `provider` may start: the free slots, and no more than what is
    /// left of its share (three quarters of the slots).
    package static func room(of provider: PushRegistration.Provider, inFlight: [PushRegistration.Provider: Int], concurrency: Int) -> Int {
        let share = max(1, concurrency * 3 / 4)
        let free = concurrency - inFlight.values.reduce(0, +)
        return max(0, min(free, share - inFlight[provider, default: 0]))
    }

    /// One attempt and its record. A record that fails to commit leaves the nudge leased until
    /// its lease ends; it is then sent again (a nudge is idempotent for the app: one more sync).
    func send(_ nudge: ClaimedNudge, senders: Senders) async {
        let provider = nudge.registration.provider.rawValue
        let outcome = await senders.send(nudge)
        let now = store.clock.wallNow().millisecondsSinceEpoch
        let finish: NudgeFinish
        switch outcome {
        case .sent:
            finish = .sent
            metrics.outcome(provider: provider, "sent")
            if let since = nudge.pendingSince { metrics.latency.recordMilliseconds(max(0, now - since)) }
        case .unregistered(let reason):
            finish = .unregistered(reason: reason)
            metrics.outcome(provider: provider, "unregistered")
            logger.info("push registration removed: the provider no longer knows the device", metadata: [
                "syncgate.user": "\(nudge.device.userID)", "syncgate.device": "\(nudge.device.deviceID)", "syncgate.push.reason": "\(reason)",
            ])
        case .providerBusy(let reason, let after):
            let until = now + min(after, configuration.retry.retryAfterCap / 1000) * 1000
            holds.withLock { $0[nudge.registration.provider] = max($0[nudge.registration.provider] ?? 0, until) }
            logger.warning("push provider asked to be left alone; its nudges wait", metadata: [
                "syncgate.push.provider": "\(provider)", "syncgate.push.until": "\(until)", "syncgate.error": "\(reason)",
            ])
            finish = retry(nudge, reason: reason, after: after, now: now)
        case .retry(let reason, let after):
            finish = retry(nudge, reason: reason, after: after, now: now)
        case .renewCredentials(let reason), .rejected(let reason):
            finish = .dropped(error: reason)
            metrics.outcome(provider: provider, "rejected")
            logger.warning("push nudge rejected by the provider", metadata: [
                "syncgate.push.provider": "\(provider)", "syncgate.device": "\(nudge.device.deviceID)", "syncgate.error": "\(reason)",
            ])
        }
        do {
            try await store.finishNudge(nudge, outcome: finish, intervalMilliseconds: configuration.intervalMilliseconds)
        } catch {
            logger.warning("push nudge not recorded; it is sent again after its lease", metadata: ["syncgate.error": "\(error)"])
        }
    }

    /// A failed attempt's record: tried again after the backoff (at least what the provider
    /// asked), or given up after the last attempt.
    private func retry(_ nudge: ClaimedNudge, reason: String, after: Int64?, now: Int64) -> NudgeFinish {
        let provider = nudge.registration.provider.rawValue
        guard let delay = configuration.retry.delay(afterAttempt: nudge.attempts, retryAfterSeconds: after, random: Double.random(in: 0..<1)) else {
            metrics.outcome(provider: provider, "given_up")
            logger.warning("push nudge given up; the next change nudges the device again", metadata: [
                "syncgate.device": "\(nudge.device.deviceID)", "syncgate.error": "\(reason)",
            ])
            return .dropped(error: "gave up after \(nudge.attempts) attempts: \(reason)")
        }
        metrics.outcome(provider: provider, "retry")
        return .retry(at: now + delay, error: reason)
    }

    /// Ends the presence of fronts that died; samples the backlog.
    func housekeeping() async throws {
        _ = try await store.deleteExpiredPresence()
        metrics.pending.record(try await store.nudgeBacklog().pending)
    }

    /// The provider clients this process has credentials for.
    struct Senders: Sendable {
        let apns: APNsClient?
        let fcm: FCMClient?

        init(configuration: PushConfiguration, http: HTTPClient) async {
            if let credentials = configuration.apns {
                apns = await APNsClient(
                    credentials: credentials, http: http, timeout: configuration.timeout,
                    baseURL: configuration.apnsBaseURL ?? { "https://\($0.host)" }
                )
            } else {
                apns = nil
            }
            if let account = configuration.fcm {
                fcm = await FCMClient(
                    account: account, http: http, priority: configuration.fcmPriority, timeout: configuration.timeout,
                    baseURL: configuration.fcmBaseURL ?? "https://fcm.googleapis.com"
                )
            } else {
                fcm = nil
            }
        }

        func send(_ nudge: ClaimedNudge) async -> PushOutcome {
            let scopes = nudge.scopes.map { scope in
                switch scope {
                case .user: "user"
                case .household(let id): "household:\(id)"
                }
            }
            switch nudge.registration.provider {
            case .apns:
                guard let apns, let topic = nudge.registration.topic, let environment = nudge.registration.environment else {
                    return .rejected(reason: "no APNs credentials are configured (SYNCGATE_APNS_KEY_FILE)")
                }
                let address = PushAddress.apns(token: nudge.registration.token, topic: topic, environment: environment)
                return await apns.send(PushNudge(address: address, scopes: scopes))
            case .fcm:
                guard let fcm else { return .rejected(reason: "no FCM service account is configured (SYNCGATE_FCM_SERVICE_ACCOUNT_FILE)") }
                return await fcm.send(PushNudge(address: .fcm(token: nudge.registration.token), scopes: scopes))
            }
        }
    }
}

/// The nudge series (see ``MetricName``).
struct NudgeMetrics: Sendable {
    let outcomes = MetricHandles<[String], Counter> { key in
        Counter(label: MetricName.nudges, dimensions: [("provider", key[0]), ("outcome", key[1])])
    }
    let latency = Metrics.Timer(label: MetricName.nudgeLatency)
    let pending = Gauge(label: MetricName.nudgesPending)

    func outcome(provider: String, _ outcome: String, count: Int = 1) {
        outcomes[[provider, outcome]].increment(by: count)
    }
}
