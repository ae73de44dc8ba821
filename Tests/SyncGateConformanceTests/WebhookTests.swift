import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Synchronization
import SyncGateCore
import SyncGateStorage
import SyncGateTestSupport
import SyncGateWebhooks
import SyncGateWire
import Testing

/// Change webhooks on both drivers, against a local receiver that checks what a real one checks:
/// the Standard Webhooks headers and signature, and each feed's order.
@Suite(.timeLimit(.minutes(10))) struct WebhookTests {
    /// Subscribes a receiver on 127.0.0.1 at `port` to every change.
    static func subscribe(_ store: SyncStore, _ name: String, port: Int, secret: String) async throws {
        #expect(try await store.createWebhook(NewWebhookSubscription(
            name: name, url: "http://127.0.0.1:\(port)/hook", secret: secret, entityTypes: nil, events: Set(WebhookEvent.allCases)
        )))
    }

    static func configuration(allowPrivate: Bool = true, delays: [Duration] = Array(repeating: .milliseconds(10), count: 20)) -> WebhookConfiguration {
        var configuration = WebhookConfiguration()
        configuration.allowPrivateAddresses = allowPrivate
        configuration.pollInterval = .milliseconds(50)
        configuration.announceInterval = .zero
        configuration.retry = WebhookRetryPolicy(delays: delays, jitter: 0)
        configuration.timeout = .seconds(60)
        configuration.leaseMilliseconds = 600_000
        return configuration
    }

    /// Runs the webhook service of a worker process on `store` while `body` runs.
    static func withService<Result: Sendable>(
        _ store: SyncStore, _ configuration: WebhookConfiguration, _ body: () async throws -> Result
    ) async throws -> Result {
        try await whileRunning(WebhookService(store: store, configuration: configuration, logger: Logger(label: "webhooks-test")), body)
    }

    /// A weight log in each of eight users' feeds (their ids): more feeds than a subscription's
    /// share of ``sixSlots``.
    static func eightFeeds(_ http: HTTPHarness) async throws -> [String] {
        let users = (1...8).map { "user\($0)" }
        for user in users { _ = try await http.results([Op.create("weightLogs", "w", ["kg": 70])], user: user) }
        return users
    }

    /// Six attempts in flight, three per subscription.
    static var sixSlots: WebhookConfiguration {
        var configuration = configuration()
        configuration.concurrency = 6
        configuration.perSubscription = 3
        return configuration
    }

    /// `scope:seq` of every change in the feeds, in feed order.
    static func feedPositions(_ harness: StoreHarness) async throws -> [String] {
        try await harness.queryTexts("SELECT scope || ':' || CAST(seq AS TEXT) FROM changes ORDER BY scope, seq")
    }

    static func positions(_ accepted: [(scope: String, change: JSONValue)]) -> [String] {
        accepted.map { "\($0.scope):\($0.change["seq"]?.intValue ?? -1)" }
    }

    @Test("a receiver sees every change after its subscription once, in feed order, signed, with its event and origin", arguments: Driver.selected)
    func everyChangeOnceInOrder(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let store = http.store.store
            // Before any subscription: not announced.
            _ = try await http.results([Op.create("weightLogs", "before", ["kg": 70])])
            let secret = WebhookSignature.newSecret()
            let receiver = WebhookReceiver(secret: secret)
            try await withTestHTTPServer(receiver.router) { port in
                try await Self.subscribe(store, "backend", port: port, secret: secret)
                let before = try await Self.feedPositions(http.store)
                _ = try await http.results([Op.create("weightLogs", "w1", ["kg": 71]), Op.create("weightLogs", "w2", ["kg": 72])])
                _ = try await http.results([Op.update("weightLogs", "w1", base: 1, ["kg": 71.5])])
                _ = try await http.results([Op.delete("weightLogs", "w2", base: 1)])
                _ = try await http.results([Op.create("weightLogs", "b1", ["kg": 80])], user: "bob")
                let key = try await ServiceAPITests.key("nutrition", [.write], in: store)
                let pushed = try await http.send(
                    .post, "/v1/service/push?wait=30000", headers: ServiceAPITests.serviceHeaders(key),
                    body: ServiceAPITests.body(user: "alice", [Op.create("weightLogs", "w3", ["kg": 73])])
                )
                #expect(pushed.status == 200)
                let expected = try await Self.feedPositions(http.store).filter { !before.contains($0) }
                #expect(expected.count == 6)

                try await Self.withService(store, Self.configuration()) {
                    try await eventually("every change delivered") { receiver.accepted.count >= expected.count }
                    // The receiver answers before the sender records the delivery.
                    try await eventually("every delivery recorded") { try await store.webhookBacklog().first?.pending == 0 }
                }
                let accepted = receiver.accepted
                #expect(receiver.deliveries.allSatisfy { $0.signatureValid })
                #expect(receiver.deliveries.allSatisfy { $0.id.hasPrefix("msg_") })
                // Every change once, each feed in order (feeds are independent of each other).
                #expect(Self.positions(accepted).sorted() == expected.sorted())
                for scope in Set(accepted.map(\.scope)) {
                    let sequences = accepted.filter { $0.scope == scope }.compactMap { $0.change["seq"]?.intValue }
                    #expect(sequences == sequences.sorted(), "\(scope): \(sequences)")
                }
                let alice = accepted.filter { $0.scope == "u:alice" }.map(\.change)
                #expect(alice.map { $0["event"]?.stringValue ?? "" } == ["created", "created", "updated", "deleted", "created"])
                #expect(alice.map { $0["entity_id"]?.stringValue ?? "" } == ["w1", "w2", "w1", "w2", "w3"])
                #expect(alice[3]["data"] == .null)
                #expect(alice[4]["origin"]?.stringValue == "service:nutrition")
                #expect(alice[0]["origin"] == nil)

                let backlog = try await store.webhookBacklog()
                #expect(backlog.map(\.pending) == [0])
                #expect(backlog.map(\.delivered) == [receiver.deliveries.count])
            }
        }
    }

    @Test("a receiver that answers 500 for a while gets every change, in order, each retry the same message", arguments: Driver.selected)
    func failingReceiverGetsEverything(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let store = http.store.store
            let secret = WebhookSignature.newSecret()
            let receiver = WebhookReceiver(secret: secret, failing: 3)
            try await withTestHTTPServer(receiver.router) { port in
                #expect(try await store.createWebhook(NewWebhookSubscription(
                    name: "flaky", url: "http://127.0.0.1:\(port)/hook", secret: secret, entityTypes: ["weightLogs"], events: [.created, .updated]
                )))
                for index in 1...4 {
                    _ = try await http.results([Op.create("weightLogs", "w\(index)", ["kg": .int(Int64(index))])])
                }
                _ = try await http.results([Op.create("recentFoods", "soup", ["name": "Soup"])])
                _ = try await http.results([Op.delete("weightLogs", "w1", base: 1)])
                try await Self.withService(store, Self.configuration()) {
                    try await eventually("the four creations delivered") { receiver.accepted.count >= 4 }
                    try await eventually("every delivery recorded") { try await store.webhookBacklog().first?.pending == 0 }
                }
                let deliveries = receiver.deliveries
                #expect(deliveries.filter { $0.status == 500 }.count == 3)
                // A retry resends the message it failed with: same id, same bytes.
                for failed in deliveries where failed.status == 500 {
                    #expect(deliveries.contains { $0.status == 200 && $0.id == failed.id && $0.body == failed.body })
                }
                // Only what the subscription asked for: no recentFoods, no delete.
                #expect(receiver.accepted.map { $0.change["entity_id"]?.stringValue ?? "" } == ["w1", "w2", "w3", "w4"])
            }
        }
    }

    @Test("a failed attempt's retry is timed from when the attempt ended, not when it began", arguments: Driver.selected)
    func retriesCountFromTheAttemptsEnd(_ driver: Driver) async throws {
        let clock = ManualClock()
        let start = clock.now
        try await StoreHarness.with(driver, clock: clock) { harness in
            let router = Router()
            // The receiver takes a minute (on the store's clock) and fails.
            router.post("hook") { _, _ -> HTTPResponse.Status in
                clock.advance(milliseconds: 60_000)
                return .internalServerError
            }
            try await withTestHTTPServer(router) { port in
                try await Self.subscribe(harness.store, "slow", port: port, secret: WebhookSignature.newSecret())
                _ = try await harness.apply([Op.create("weightLogs", "w1", ["kg": 70])])
                // The clock stands still but for the receiver: the retry is not due again.
                try await Self.withService(harness.store, Self.configuration(delays: [.seconds(5)])) {
                    try await eventually("the failure recorded") {
                        try await harness.queryTexts("SELECT CAST(count(*) AS TEXT) FROM webhook_deliveries WHERE last_error IS NOT NULL") == ["1"]
                    }
                }
                let next = try await harness.queryTexts("SELECT CAST(next_attempt_at AS TEXT) FROM webhook_deliveries").compactMap { Int64($0) }
                #expect(next == [start.millisecondsSinceEpoch + 65_000], "\(next) against \(start.millisecondsSinceEpoch)")
            }
        }
    }

    @Test("an attempt cut short by the worker's shutdown is not a failure: nothing recorded, sent again after its lease", arguments: Driver.selected)
    func aShutdownIsNotAFailedAttempt(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let reached = TestGate("the receiver reached")
            let router = Router()
            router.post("hook") { _, _ -> HTTPResponse.Status in
                reached.open()
                // Answers only after the sender has gone.
                try? await Task.sleep(for: .seconds(3600))
                return .ok
            }
            try await withTestHTTPServer(router) { port in
                try await Self.subscribe(harness.store, "slow", port: port, secret: WebhookSignature.newSecret())
                _ = try await harness.apply([Op.create("weightLogs", "w1", ["kg": 70])])
                try await Self.withService(harness.store, Self.configuration(delays: [])) {
                    try await reached.wait()
                }
                // A failure would have paused the subscription (no retries left) and said why.
                #expect(try await harness.store.webhooks().map(\.pausedAt) == [nil])
                #expect(try await harness.queryTexts("SELECT CAST(count(*) AS TEXT) FROM webhook_deliveries WHERE last_error IS NOT NULL") == ["0"])
            }
        }
    }

    @Test("a receiver on a loopback address is refused unless allowed: its subscription pauses, nothing is sent", arguments: Driver.selected)
    func loopbackIsRefused(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let store = http.store.store
            let secret = WebhookSignature.newSecret()
            let receiver = WebhookReceiver(secret: secret)
            try await withTestHTTPServer(receiver.router) { port in
                try await Self.subscribe(store, "inside", port: port, secret: secret)
                _ = try await http.results([Op.create("weightLogs", "w1", ["kg": 70])])
                try await Self.withService(store, Self.configuration(allowPrivate: false, delays: [.milliseconds(10)])) {
                    try await eventually("the subscription paused") { try await store.webhooks().first?.pausedAt != nil }
                }
                let paused = try #require(try await store.webhooks().first)
                #expect(paused.pausedReason?.contains("127.0.0.1") == true, "\(paused.pausedReason ?? "")")
                #expect(receiver.deliveries.isEmpty)
                #expect(try await store.webhookBacklog().first?.pending == 1)
                #expect(try await store.pendingWebhookDeliveries() == 1)

                // Allowed, and resumed: the held delivery goes out.
                #expect(try await store.resumeWebhook(name: "inside"))
                try await Self.withService(store, Self.configuration(allowPrivate: true)) {
                    try await eventually("the held delivery sent") { receiver.accepted.count == 1 }
                }
            }
        }
    }

    @Test("replay sends delivered messages again under their ids, in order", arguments: Driver.selected)
    func replay(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let store = http.store.store
            let secret = WebhookSignature.newSecret()
            let receiver = WebhookReceiver(secret: secret)
            try await withTestHTTPServer(receiver.router) { port in
                try await Self.subscribe(store, "replayed", port: port, secret: secret)
                _ = try await http.results([Op.create("weightLogs", "w1", ["kg": 70])])
                _ = try await http.results([Op.create("weightLogs", "w2", ["kg": 71])])
                let sent = try await Self.withService(store, Self.configuration()) {
                    try await eventually("both delivered") { receiver.accepted.count == 2 }
                    try await eventually("both recorded") { try await store.webhookBacklog().first?.pending == 0 }
                    let sent = receiver.deliveries.count
                    #expect(try await store.replayWebhook(name: "replayed", from: Timestamp(millisecondsSinceEpoch: 0)) == sent)
                    try await eventually("both delivered again") { receiver.deliveries.count == 2 * sent }
                    return sent
                }
                let ids = receiver.deliveries.map(\.id)
                #expect(Array(ids[sent...]) == Array(ids[..<sent]))
                #expect(try await store.replayWebhook(name: "nobody", from: Timestamp(millisecondsSinceEpoch: 0)) == nil)
            }
        }
    }

    @Test("while a subscription exists, compaction and the tombstone purge keep every change some subscription has not received", arguments: Driver.selected)
    func compactionWaitsForEverySubscription(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let store = http.store.store
            for name in ["slow", "slower"] {
                #expect(try await store.createWebhook(NewWebhookSubscription(
                    name: name, url: "http://192.0.2.1/hook", secret: WebhookSignature.newSecret(), entityTypes: nil, events: Set(WebhookEvent.allCases)
                )))
            }
            _ = try await http.results([Op.create("weightLogs", "w1", ["kg": 70])])
            _ = try await http.results([Op.update("weightLogs", "w1", base: 1, ["kg": 71])])
            _ = try await http.results([Op.delete("weightLogs", "w1", base: 2)])
            let written = try await Self.feedPositions(http.store)
            func maintenanceKeepsEverything() async throws {
                // Nor does the purge pass lock the feed it cannot purge (but on Citus, which cannot
                // join the feeds with the coordinator's webhook tables: the purge skips it there).
                if TestDatabases.citusWorkers == nil {
                    #expect(try await store.driver.scopesWithTombstones(before: .now().adding(milliseconds: 60_000)) == [])
                }
                _ = try await store.compactFeeds()
                #expect(try await store.purgeTombstones(olderThanMilliseconds: -1).purgedTombstones == 0)
                #expect(try await Self.feedPositions(http.store) == written)
            }
            // Not announced yet.
            try await maintenanceKeepsEverything()
            let announced = try await store.announceChanges(after: nil, feedLimit: 100, changeLimit: 100)
            #expect(announced.changes == 3 && announced.deliveries == 2)
            // Announced, not delivered: each message's range stays whole.
            try await maintenanceKeepsEverything()
            // Ranges of one feed that overlap (as messages made before migration 0013 can): each
            // message reads exactly its own range, every change once.
            try await http.store.execute("UPDATE webhook_deliveries SET last_seq = 2 WHERE subscription_id = (SELECT id FROM webhook_subscriptions WHERE name = 'slower')")
            let claimed = try await store.claimWebhookDeliveries(limit: 10, perSubscription: 10, excluding: [], leaseMilliseconds: 60_000)
            #expect(claimed.map(\.subscription.name) == ["slow", "slower"])
            #expect(claimed.map { $0.changes.map(\.row.sequence) } == [[1, 2, 3], [1, 2]])
            // One subscription received them; the other holds them.
            try await store.finishWebhookDelivery(claimed[0].claim, outcome: .delivered)
            try await maintenanceKeepsEverything()
            try await store.finishWebhookDelivery(claimed[1].claim, outcome: .delivered)
            _ = try await store.compactFeeds()
            #expect(try await Self.feedPositions(http.store).count == written.count - 2)
            #expect(try await store.driver.scopesWithTombstones(before: .now().adding(milliseconds: 60_000)) == [.user("alice")])
            #expect(try await store.purgeTombstones(olderThanMilliseconds: -1).purgedTombstones == 1)
            // Nothing new: a second pass makes no message.
            let again = try await store.announceChanges(after: nil, feedLimit: 100, changeLimit: 100)
            #expect(again.changes == 0 && again.deliveries == 0)
        }
    }

    /// A subscription `backend` (its receiver is never reached here) and two messages of one
    /// feed, each announced: `w1` created, then updated.
    static func twoMessagesOfOneFeed(_ http: HTTPHarness) async throws -> SyncStore {
        let store = http.store.store
        #expect(try await store.createWebhook(NewWebhookSubscription(
            name: "backend", url: "http://192.0.2.1/hook", secret: WebhookSignature.newSecret(), entityTypes: nil, events: Set(WebhookEvent.allCases)
        )))
        _ = try await http.results([Op.create("weightLogs", "w1", ["kg": 70])])
        #expect(try await store.announceChanges(after: nil, feedLimit: 100, changeLimit: 100).deliveries == 1)
        _ = try await http.results([Op.update("weightLogs", "w1", base: 1, ["kg": 71])])
        #expect(try await store.announceChanges(after: nil, feedLimit: 100, changeLimit: 100).deliveries == 1)
        return store
    }

    @Test("a claim records the messages its sender delivered and, in the same call, takes the next message of their feeds", arguments: Driver.selected)
    func aClaimRecordsWhatWasDelivered(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let store = try await Self.twoMessagesOfOneFeed(http)
            func claim(recording delivered: [WebhookClaim], limit: Int = 10) async throws -> [WebhookDelivery] {
                try await store.claimWebhookDeliveries(delivered: delivered, limit: limit, perSubscription: 10, excluding: [], leaseMilliseconds: 60_000)
            }
            // Feed order: the second message waits while the first is undelivered.
            let first = try await claim(recording: [])
            #expect(first.map { $0.changes.map(\.row.sequence) } == [[1]])
            #expect(try await claim(recording: []).isEmpty)
            // Recording the first makes the second due in the same call.
            let second = try await claim(recording: first.map(\.claim))
            #expect(second.map { $0.changes.map(\.row.sequence) } == [[2]])
            #expect(second.map(\.subscription.name) == ["backend"])
            #expect(try await store.webhookBacklog().map { [$0.pending, $0.delivered] } == [[1, 1]])
            // A claim of nothing only records.
            #expect(try await claim(recording: second.map(\.claim), limit: 0).isEmpty)
            #expect(try await store.webhookBacklog().map { [$0.pending, $0.delivered] } == [[0, 2]])
            #expect(try await claim(recording: []).isEmpty)
        }
    }

    @Test("messages of two feeds whose ids are canonically equivalent each carry their own changes", arguments: Driver.selected)
    func canonicallyEquivalentFeedsAreClaimedApart(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let store = http.store.store
            #expect(try await store.createWebhook(NewWebhookSubscription(
                name: "backend", url: "http://192.0.2.1/hook", secret: WebhookSignature.newSecret(), entityTypes: nil, events: Set(WebhookEvent.allCases)
            )))
            let (nfc, nfd) = ("jos\u{E9}", "jose\u{301}")
            _ = try await http.results([Op.create("weightLogs", "composed", ["kg": 70])], user: nfc)
            _ = try await http.results([Op.create("weightLogs", "decomposed", ["kg": 80])], user: nfd)
            #expect(try await store.announceChanges(after: nil, feedLimit: 100, changeLimit: 100).deliveries == 2)
            let claimed = try await store.claimWebhookDeliveries(delivered: [], limit: 10, perSubscription: 10, excluding: [], leaseMilliseconds: 60_000)
            let byUser = claimed.map { delivery -> ([UInt8], [String]) in
                guard case .user(let id) = delivery.scope else { return ([], []) }
                return (Array(id.utf8), delivery.changes.map(\.row.entityID))
            }
            #expect(byUser.count == 2)
            #expect(byUser.contains { $0.0 == Array(nfc.utf8) && $0.1 == ["composed"] }, "\(byUser)")
            #expect(byUser.contains { $0.0 == Array(nfd.utf8) && $0.1 == ["decomposed"] }, "\(byUser)")
        }
    }

    @Test("an attempt a resume or a replay overtook records nothing: its message is sent again, in feed order, and pauses nothing", arguments: Driver.selected)
    func overtakenAttempts(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let store = try await Self.twoMessagesOfOneFeed(http)
            // A clock that stands still and one lease length: every claim ends its lease at the
            // same time, so only the claim's number tells an overtaken attempt from the current one.
            let now = Timestamp.now().adding(milliseconds: 1000)
            let driver = store.driver
            func claim(recording delivered: [WebhookClaim] = []) async throws -> [WebhookDelivery] {
                try await driver.claimWebhookDeliveries(delivered: delivered, limit: 10, perSubscription: 10, excluding: [], leaseMilliseconds: 60_000, now: now)
            }
            func finish(_ claim: WebhookClaim, _ outcome: WebhookAttemptOutcome) async throws {
                try await driver.finishWebhookDelivery(claim, outcome: outcome, now: now)
            }
            func sequences(_ deliveries: [WebhookDelivery]) -> [[Int64]] { deliveries.map { $0.changes.map(\.row.sequence) } }

            // An operator pauses and resumes while the first message's attempt is in flight: the
            // message is due again, and a second attempt takes it.
            let overtaken = try await claim()
            #expect(sequences(overtaken) == [[1]])
            #expect(try await driver.setWebhookPaused(name: "backend", reason: "operator", now: now))
            #expect(try await driver.setWebhookPaused(name: "backend", reason: nil, now: now))
            let current = try await claim()
            #expect(current.map(\.id) == overtaken.map(\.id))
            #expect(current.map(\.leaseEnd) == overtaken.map(\.leaseEnd))
            // The overtaken attempt's outcomes change nothing: no pause, no retry time, no record,
            // so the feed's next message still waits.
            try await finish(overtaken[0].claim, .pause(error: "8 attempts failed"))
            try await finish(overtaken[0].claim, .retry(at: 0, error: "stale"))
            #expect(try await claim(recording: overtaken.map(\.claim)).isEmpty)
            #expect(try await store.webhooks().map(\.pausedAt) == [nil])
            #expect(try await store.webhookBacklog().map { [$0.pending, $0.failing, $0.delivered] } == [[2, 0, 0]])
            // The current attempt's record counts, and the next message follows.
            let next = try await claim(recording: current.map(\.claim))
            #expect(sequences(next) == [[2]])

            // A replay lands after the second message was delivered and before its record: the
            // record changes nothing, and the replay sends both again, in feed order.
            #expect(try await driver.replayWebhook(name: "backend", from: Timestamp(millisecondsSinceEpoch: 0), now: now) == 2)
            let replayed = try await claim(recording: next.map(\.claim))
            #expect(sequences(replayed) == [[1]])
            let then = try await claim(recording: replayed.map(\.claim))
            #expect(sequences(then) == [[2]])
            #expect(try await claim(recording: then.map(\.claim)).isEmpty)
            #expect(try await store.webhookBacklog().map { [$0.pending, $0.delivered] } == [[0, 2]])
        }
    }

    /// Receivers that fail slowly (a firewall's timeouts, an overloaded service's late 500s) hold
    /// one attempt at a time each once they have failed, not their share: another receiver keeps
    /// getting every change.
    @Test("failing receivers hold one slot each; a healthy one gets everything", arguments: Driver.selected)
    func failingReceiversHoldOneSlotEach(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let store = http.store.store
            let released = TestGate("the failing receivers' release")
            defer { released.open() }
            let held = Mutex<[String: Int]>([:])
            let failing = Router()
            failing.post("hook/:name") { _, context -> HTTPResponse.Status in
                let name = context.parameters.get("name") ?? "?"
                // The first request of each fails at once; the rest hang, then fail.
                let count = held.withLock { held -> Int in
                    held[name, default: 0] += 1
                    return held[name]!
                }
                if count > 1 { try await released.wait() }
                return .internalServerError
            }
            let secret = WebhookSignature.newSecret()
            let receiver = WebhookReceiver(secret: secret)
            try await withTestHTTPServer(failing) { failingPort in
                try await withTestHTTPServer(receiver.router) { port in
                    // The failing receivers want weight logs, the healthy one goals.
                    for name in ["down1", "down2"] {
                        #expect(try await store.createWebhook(NewWebhookSubscription(
                            name: name, url: "http://127.0.0.1:\(failingPort)/hook/\(name)", secret: secret, entityTypes: ["weightLogs"],
                            events: Set(WebhookEvent.allCases)
                        )))
                    }
                    #expect(try await store.createWebhook(NewWebhookSubscription(
                        name: "healthy", url: "http://127.0.0.1:\(port)/hook", secret: secret, entityTypes: ["userGoals"], events: Set(WebhookEvent.allCases)
                    )))
                    // Each failing receiver could take its whole share of the slots.
                    let users = try await Self.eightFeeds(http)
                    try await Self.withService(store, Self.sixSlots) {
                        try await eventually("both failing receivers failed and hang") { held.withLock { $0.values.filter { $0 >= 2 }.count } == 2 }
                        // Now the healthy receiver's changes: it still gets slots.
                        for user in users { _ = try await http.results([Op.create("userGoals", "g", ["steps": 9000])], user: user) }
                        try await eventually("the healthy receiver has every feed's change") { receiver.accepted.count == users.count }
                        #expect(held.withLock { $0.values.allSatisfy { $0 <= 3 } }, "\(held.withLock { $0 })")
                    }
                }
            }
        }
    }

    @Test("the service API manages subscriptions with an admin key: secret shown once, private receivers refused, unknown names 404", arguments: Driver.selected)
    func serviceAPI(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let store = http.store.store
            let admin = ServiceAPITests.serviceHeaders(try await ServiceAPITests.key("ops", [.admin], in: store))
            let writer = ServiceAPITests.serviceHeaders(try await ServiceAPITests.key("writer", [.write, .read], in: store))
            let request = #"{"name": "billing", "url": "http://93.184.216.34/hooks", "entity_types": ["weightLogs"], "events": ["created", "deleted"]}"#
            #expect(try await http.send(.post, "/v1/service/webhooks", headers: writer, body: request).status == 403)
            #expect(try await http.send(.get, "/v1/service/webhooks", headers: writer).status == 403)

            let created = try await http.send(.post, "/v1/service/webhooks", headers: admin, body: request)
            #expect(created.status == 201, "\(String(describing: created.json))")
            let secret = try #require(created.json?["secret"]?.stringValue)
            #expect(WebhookSignature.key(of: secret) != nil)
            #expect(created.json?["events"] == ["created", "deleted"])
            #expect(try await store.webhooks().first?.secret == secret)
            // Taken name, private receiver, bad event, not a URL: 400 and nothing stored.
            for body in [
                request,
                #"{"name": "inside", "url": "http://127.0.0.1:9/hook"}"#,
                #"{"name": "metadata", "url": "http://169.254.169.254/latest"}"#,
                #"{"name": "odd", "url": "http://93.184.216.34/", "events": ["exploded"]}"#,
                #"{"name": "file", "url": "file:///etc/passwd"}"#,
                #"{"name": "no url"}"#,
                // A NUL PostgreSQL cannot store: refused, not a 500.
                #"{"name": "nul", "url": "http://93.184.216.34/", "entity_types": ["a\u0000b"]}"#,
                #"{"name": "nul2", "url": "http://93.184.216.34/\u0000"}"#,
            ] {
                let refused = try await http.send(.post, "/v1/service/webhooks", headers: admin, body: body)
                #expect(refused.status == 400, "\(body): \(String(describing: refused.json))")
            }
            #expect(try await store.webhooks().map(\.name) == ["billing"])

            let listed = try await http.send(.get, "/v1/service/webhooks", headers: admin)
            #expect(listed.json?["webhooks"]?[0]?["name"]?.stringValue == "billing")
            #expect(listed.json?["webhooks"]?[0]?["secret"] == nil)
            let paused = try await http.send(.post, "/v1/service/webhooks/billing/pause", headers: admin)
            #expect(paused.json?["paused_at"]?.stringValue != nil)
            let resumed = try await http.send(.post, "/v1/service/webhooks/billing/resume", headers: admin)
            #expect(resumed.json?["paused_at"] == .null)
            let replayed = try await http.send(.post, "/v1/service/webhooks/billing/replay", headers: admin, body: #"{"from": "2026-01-01T00:00:00Z"}"#)
            #expect(replayed.json?["replayed"] == 0)
            #expect(try await http.send(.post, "/v1/service/webhooks/billing/replay", headers: admin, body: #"{"from": "yesterday"}"#).status == 400)
            #expect(try await http.send(.post, "/v1/service/webhooks/nobody/pause", headers: admin).status == 404)
            // Unknown query parameters are refused, as on every /v1 route.
            #expect(try await http.send(.post, "/v1/service/webhooks/billing/pause?bogus=1", headers: admin).status == 400)
            #expect(try await http.send(.delete, "/v1/service/webhooks/billing", headers: admin).status == 204)
            #expect(try await http.send(.delete, "/v1/service/webhooks/billing", headers: admin).status == 404)
            #expect(try await store.webhooks().isEmpty)
        }
    }

    @Test("a receiver that never answers holds only its own attempts: another receiver gets every change meanwhile", arguments: Driver.selected)
    func aStuckReceiverHoldsNoOtherOne(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let store = http.store.store
            let released = TestGate("the stuck receiver's release")
            let arrived = Mutex(0)
            let stuck = Router()
            stuck.post("hook") { _, _ -> HTTPResponse.Status in
                arrived.withLock { $0 += 1 }
                try await released.wait()
                return .ok
            }
            let secret = WebhookSignature.newSecret()
            let receiver = WebhookReceiver(secret: secret)
            try await withTestHTTPServer(stuck) { stuckPort in
                try await withTestHTTPServer(receiver.router) { port in
                    for (name, at) in [("stuck", stuckPort), ("healthy", port)] {
                        try await Self.subscribe(store, name, port: at, secret: secret)
                    }
                    let users = try await Self.eightFeeds(http)
                    try await Self.withService(store, Self.sixSlots) {
                        try await eventually("the healthy receiver has every feed's change") { receiver.accepted.count == users.count }
                        // The stuck receiver holds its share (its requests may still be on their way), no more.
                        try await eventually("the stuck receiver holds its share") { arrived.withLock { $0 } >= 3 }
                        #expect(arrived.withLock { $0 } == 3)
                        released.open()
                        try await eventually("the stuck receiver served too") { try await store.webhookBacklog().allSatisfy { $0.pending == 0 } }
                    }
                }
            }
        }
    }
}
