import AsyncHTTPClient
import Foundation
import HTTPTypes
import HummingbirdTesting
import ServiceLifecycle
import Logging
import SyncGateCore
import SyncGateHTTP
import SyncGatePush
import SyncGateStorage
import SyncGateTestSupport
import SyncGateWire
import Testing

/// Push nudges end to end on both drivers: pushes through the HTTP front, a nudger and a front's
/// presence publisher, and mocks of APNs and FCM over TLS that check what Apple and Google check.
@Suite(.timeLimit(.minutes(10))) struct NudgeTests {
    static let alicePhone = String(repeating: "a1", count: 32)
    static let path = "/v1/devices/current/push"

    /// The providers' mocks, a nudger configured for them, and a presence publisher for the
    /// harness's front, running while `body` runs.
    struct Providers: Sendable {
        let apns: APNsMock
        let fcm: FCMMock
        let configuration: PushConfiguration
    }

    static func withProviders<Result: Sendable>(
        interval: Duration = .seconds(30), _ body: @Sendable (Providers) async throws -> Result
    ) async throws -> Result {
        // The nudger's clients sign and ask for tokens at the real time: the mocks check their
        // age against it too (a frozen clock refused them once a loaded run passed a minute).
        let clock = ManualWallClock.wall()
        let authority = try TestCertificateAuthority()
        let apns = try await APNsMock(clock: clock)
        let fcm = try await FCMMock(clock: clock)
        let fcmPort = PortBox()
        return try await withTestHTTPServer(apns.router, server: try authority.http2Server()) { apnsPort in
            try await withTestHTTPServer(fcm.router(port: { fcmPort.value }), server: try authority.http2Server()) { port in
                fcmPort.value = port
                var configuration = PushConfiguration()
                configuration.apns = try APNsCredentials(keyPEM: apns.keyPEM, keyID: apns.keyID, teamID: apns.teamID)
                configuration.fcm = try FCMServiceAccount(json: fcm.serviceAccountJSON(port: port))
                configuration.apnsBaseURL = { _ in "https://127.0.0.1:\(apnsPort)" }
                configuration.fcmBaseURL = "https://127.0.0.1:\(port)"
                configuration.tls = authority.client
                configuration.interval = interval
                configuration.timeout = .seconds(60)
                configuration.pollInterval = .milliseconds(50)
                configuration.markInterval = .zero
                configuration.sweepInterval = .seconds(3600)
                configuration.retry.base = 20
                configuration.retry.cap = 100
                return try await body(Providers(apns: apns, fcm: fcm, configuration: configuration))
            }
        }
    }

    static func nudger(_ http: HTTPHarness, _ configuration: PushConfiguration) -> NudgeService {
        NudgeService(store: http.store.store, configuration: configuration, logger: Logger(label: "nudges-test"))
    }

    static func presence(_ http: HTTPHarness) -> PresencePublisher {
        PresencePublisher(store: http.store.store, watcher: http.watcher, lifetime: .seconds(30), flushInterval: .milliseconds(10), logger: Logger(label: "presence-test"))
    }

    static func register(_ http: HTTPHarness, _ user: String, _ device: String, _ body: JSONValue) async throws {
        let answer = try await http.send(.put, path, headers: try await http.headers(user, device: device), body: body.serialized())
        #expect(answer.status == 200)
    }

    static func apns(_ token: String) -> JSONValue {
        ["provider": "apns", "token": .string(token), "topic": "com.example.timetracker", "environment": "sandbox"]
    }

    static func fcm(_ token: String) -> JSONValue { ["provider": "fcm", "token": .string(token)] }

    /// Alice's household `home` with Bob in it (before anyone registers: not nudged).
    static func household(_ http: HTTPHarness) async throws {
        _ = try await http.results([Op.create("households", "home", ["name": "Home"]), HouseholdTests.member("home", "bob")], device: "a-phone")
    }

    /// Whether every feed advance has been looked at and every nudge due now was sent or dropped.
    static func settled(_ http: HTTPHarness) async throws -> Bool {
        let now = Timestamp.now().millisecondsSinceEpoch
        let behind = try await http.store.queryTexts(
            "SELECT CAST(count(*) AS TEXT) FROM push_positions p JOIN feeds f ON f.scope = p.scope WHERE f.head > p.nudged"
        )
        let open = try await http.store.queryTexts(
            "SELECT CAST(count(*) AS TEXT) FROM push_registrations WHERE leased_until IS NOT NULL OR due_at <= \(now)"
        )
        return behind == ["0"] && open == ["0"]
    }

    /// The feeds listener wakes the nudger's loop only when a pass had nothing to look at: a
    /// missed wake-up would hold a nudge back for a poll interval, one at every commit cost CPU.
    @Test("a noted feed wakes the loop only when nothing was waiting for a pass", arguments: [Driver.sqlite])
    func noteWakesOnlyAnIdleLoop(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let nudger = NudgeService(store: harness.store, configuration: PushConfiguration(), logger: Logger(label: "nudges-test"))
            let home = Scope.household("home"), alice = Scope.user("alice")
            // A new nudger looks at every feed first: nothing to wake it for.
            #expect(!nudger.note([.feedAdvanced(home, head: 1)]))
            #expect(nudger.takeAdvanced() == ([], true))
            #expect(!nudger.note([]))
            #expect(nudger.note([.feedAdvanced(home, head: 2)]))
            #expect(!nudger.note([.feedAdvanced(alice, head: 1), .feedAdvanced(home, head: 3)]))
            #expect(nudger.takeAdvanced() == ([home, alice], false))
            #expect(nudger.takeAdvanced() == ([], false))
            // Missed notifications (or a household joined): every feed, and a wake-up once.
            #expect(nudger.note([.resynchronize]))
            #expect(!nudger.note([.feedAdvanced(home, head: 4), .scopesChanged(userID: "alice", version: 2)]))
            #expect(nudger.takeAdvanced() == ([], true))
            #expect(nudger.note([.scopesChanged(userID: "bob", version: 1)]))
        }
    }

    @Test("a household member's device with no live connection gets one nudge; the writer's none", arguments: Driver.selected)
    func theOtherMemberIsNudgedTheWriterIsNot(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 1) { http in
            try await Self.household(http)
            try await Self.withProviders { providers in
                try await Self.register(http, "alice", "a-phone", Self.apns(Self.alicePhone))
                try await Self.register(http, "bob", "b-phone", Self.fcm("fcm-bob"))
                try await whileRunning(Self.nudger(http, providers.configuration)) {
                    _ = try await http.results([Op.create("inventory", "milk", ["qty": 1], household: "home")], device: "a-phone")
                    try await eventually("Bob's phone nudged") { !providers.fcm.received.isEmpty }
                    try await eventually("the nudger settled") { try await Self.settled(http) }
                    #expect(providers.fcm.received.map(\.registration) == ["fcm-bob"])
                    #expect(providers.fcm.received.first?.data == ["type": "sync_nudge", "scopes": #"["household:home"]"#])
                    #expect(providers.apns.received.isEmpty && providers.apns.arrivals == 0)

                    // Bob writes from his phone: Alice's phone is nudged, Bob's is not.
                    _ = try await http.results([Op.create("inventory", "eggs", ["qty": 6], household: "home")], user: "bob", device: "b-phone")
                    try await eventually("Alice's phone nudged") { !providers.apns.received.isEmpty }
                    try await eventually("the nudger settled") { try await Self.settled(http) }
                    #expect(providers.apns.received.map(\.deviceToken) == [Self.alicePhone])
                    #expect(providers.apns.received.first?.payload["scopes"] == ["household:home"])
                    #expect(providers.fcm.received.count == 1)
                    #expect(providers.apns.refused.isEmpty && providers.fcm.refused.isEmpty)
                }
            }
        }
    }

    @Test("a device holding an event stream is not nudged; once it closes it is", arguments: Driver.selected)
    func aLiveConnectionHoldsTheNudgeBack(_ driver: Driver) async throws {
        // Keep-alives often: a front learns that a stream's client went at its next write.
        var front = HTTPHarness.testConfiguration
        front.keepAliveInterval = .milliseconds(200)
        try await HTTPHarness.with(driver, setup: .live, configuration: front, workers: 1) { http in
            try await Self.household(http)
            try await Self.withProviders { providers in
                var configuration = providers.configuration
                configuration.liveRecheck = .milliseconds(300)
                // LiveTests.openEvents connects as device "watcher".
                try await Self.register(http, "bob", "watcher", Self.fcm("fcm-bob"))
                try await whileRunning(Self.presence(http)) {
                    try await whileRunning(Self.nudger(http, configuration)) {
                        let port = try #require(http.client.port)
                        let token = try await http.token("bob")
                        let stream = Task {
                            var events = try await LiveTests.openEvents(port: port, token: token).1
                            while try await events.nextEvent(timeout: hangGuard) != nil {}
                        }
                        try await eventually("the stream published as present") {
                            try await http.store.queryTexts("SELECT device_id FROM push_presence") == ["watcher"]
                        }
                        _ = try await http.results([Op.create("inventory", "milk", ["qty": 1], household: "home")], device: "a-phone")
                        // Held while the stream is open, looked at again, and dropped.
                        try await eventually("the nudge dropped") {
                            let pending = try await http.store.store.nudgeBacklog().pending
                            return try await Self.settled(http) && pending == 0
                        }
                        #expect(providers.fcm.received.isEmpty && providers.fcm.grants == 0)

                        stream.cancel()
                        _ = await stream.result
                        try await eventually("the closed stream published") { try await http.store.queryTexts("SELECT device_id FROM push_presence").isEmpty }
                        _ = try await http.results([Op.create("inventory", "eggs", ["qty": 1], household: "home")], device: "a-phone")
                        try await eventually("Bob's device nudged") { !providers.fcm.received.isEmpty }
                        try await eventually("the nudger settled") { try await Self.settled(http) }
                        #expect(providers.fcm.received.count == 1)
                    }
                }
            }
        }
    }

    @Test("fifty quick pushes give one nudge in an interval", arguments: Driver.selected)
    func quickPushesCoalesce(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 1) { http in
            try await Self.household(http)
            try await Self.withProviders(interval: .seconds(3600)) { providers in
                try await Self.register(http, "bob", "b-phone", Self.fcm("fcm-bob"))
                try await whileRunning(Self.nudger(http, providers.configuration)) {
                    for index in 1...50 {
                        _ = try await http.results([Op.create("inventory", "item\(index)", ["qty": .int(Int64(index))], household: "home")], device: "a-phone")
                    }
                    try await eventually("Bob's phone nudged") { !providers.fcm.received.isEmpty }
                    try await eventually("the nudger settled") { try await Self.settled(http) }
                    #expect(providers.fcm.received.count == 1)
                    // What came after the nudge waits for the next interval, in one row.
                    let pending = try await http.store.queryTexts("SELECT CAST(count(*) AS TEXT) FROM push_registrations WHERE due_at IS NOT NULL")
                    #expect(pending == ["0"] || pending == ["1"])
                }
            }
        }
    }

    @Test("a 410 from APNs removes the registration", arguments: Driver.selected)
    func anUnregisteredDeviceIsRemoved(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 1) { http in
            try await Self.household(http)
            try await Self.withProviders { providers in
                let bobsPhone = String(repeating: "b2", count: 32)
                try await Self.register(http, "bob", "b-phone", Self.apns(bobsPhone))
                providers.apns.script(bobsPhone, ScriptedAnswer(410, "Unregistered"))
                try await whileRunning(Self.nudger(http, providers.configuration)) {
                    _ = try await http.results([Op.create("inventory", "milk", ["qty": 1], household: "home")], device: "a-phone")
                    try await eventually("the registration removed") {
                        try await http.send(.get, Self.path, headers: try await http.headers("bob", device: "b-phone")).status == 404
                    }
                    #expect(providers.apns.received.isEmpty && providers.apns.arrivals == 1)
                }
            }
        }
    }

    @Test("a provider failing for a while delays the nudge, not pushes or pulls", arguments: Driver.selected)
    func aFailingProviderDelaysOnlyNudges(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 1) { http in
            try await Self.household(http)
            try await Self.withProviders { providers in
                try await Self.register(http, "bob", "b-phone", Self.fcm("fcm-bob"))
                providers.fcm.script("fcm-bob", ScriptedAnswer(500, "INTERNAL"), ScriptedAnswer(503, "UNAVAILABLE"), ScriptedAnswer(503, "UNAVAILABLE"))
                try await whileRunning(Self.nudger(http, providers.configuration)) {
                    _ = try await http.results([Op.create("inventory", "milk", ["qty": 1], household: "home")], device: "a-phone")
                    // Pushes and pulls go on while the nudge is retried.
                    for index in 1...5 {
                        let results = try await http.results([Op.create("weightLogs", "w\(index)", ["kg": 70])], user: "bob", device: "b-phone")
                        #expect(results.first?["status"] == "applied")
                        #expect(try await http.pull(user: "bob", device: "b-phone").status == 200)
                    }
                    try await eventually("the nudge sent after the failures") { !providers.fcm.received.isEmpty }
                    try await eventually("the nudger settled") { try await Self.settled(http) }
                    #expect(providers.fcm.received.count == 1)
                    #expect(try await http.store.queryTexts("SELECT CAST(attempts AS TEXT) FROM push_registrations") == ["0"])
                }
            }
        }
    }

    @Test("a provider that answers 5xx with Retry-After gets no nudge before then; the other provider's go out", arguments: Driver.selected)
    func aBusyProviderIsLeftAloneUntilItsRetryAfter(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 1) { http in
            try await Self.household(http)
            try await Self.withProviders { providers in
                try await Self.register(http, "bob", "b-phone", Self.fcm("fcm-bob"))
                // A Retry-After past any clock (milliseconds of it would overflow): held an hour.
                providers.fcm.script("fcm-bob", ScriptedAnswer(503, "UNAVAILABLE", retryAfter: Int.max))
                func attempts(_ token: String) async throws -> [String] {
                    try await http.store.queryTexts("SELECT CAST(attempts AS TEXT) FROM push_registrations WHERE token = '\(token)' AND leased_until IS NULL")
                }
                try await whileRunning(Self.nudger(http, providers.configuration)) {
                    _ = try await http.results([Op.create("inventory", "milk", ["qty": 1], household: "home")], device: "a-phone")
                    try await eventually("FCM's 503 recorded") { try await attempts("fcm-bob") == ["1"] }
                    // Carol (FCM) and Bob's iPad (APNs) become due together, in one claim's reach.
                    _ = try await http.results([HouseholdTests.member("home", "carol")], device: "a-phone")
                    try await Self.register(http, "carol", "c-phone", Self.fcm("fcm-carol"))
                    try await Self.register(http, "bob", "b-ipad", Self.apns(String(repeating: "ab", count: 32)))
                    _ = try await http.results([Op.create("inventory", "eggs", ["qty": 6], household: "home")], device: "a-phone")
                    try await eventually("the APNs nudge sent") { providers.apns.received.count == 1 }
                    try await eventually("no attempt in flight") {
                        try await http.store.queryTexts("SELECT CAST(count(*) AS TEXT) FROM push_registrations WHERE leased_until IS NOT NULL") == ["0"]
                    }
                    // FCM asked for an hour: Carol's nudge waits, untried.
                    #expect(providers.fcm.received.isEmpty)
                    #expect(try await attempts("fcm-carol") == ["0"])
                }
            }
        }
    }

    @Test("a provider that does not answer leaves the other room: an FCM nudge goes out while every APNs attempt hangs", arguments: Driver.selected)
    func aStalledProviderLeavesTheOtherRoom(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 1) { http in
            try await Self.household(http)
            try await Self.withProviders { providers in
                // Bob's five iPads, then his phone on FCM: more APNs nudges due than the nudger's slots.
                for index in 1...5 {
                    try await Self.register(http, "bob", "b-ipad\(index)", Self.apns(String(repeating: "b\(index)", count: 32)))
                }
                try await Self.register(http, "bob", "b-phone", Self.fcm("fcm-bob"))
                let gate = TestGate("APNs answers")
                defer { gate.open() }
                providers.apns.hold(until: gate)
                var configuration = providers.configuration
                configuration.concurrency = 4
                try await whileRunning(Self.nudger(http, configuration)) {
                    _ = try await http.results([Op.create("inventory", "milk", ["qty": 1], household: "home")], device: "a-phone")
                    try await eventually("the FCM nudge sent while APNs holds every attempt") { !providers.fcm.received.isEmpty }
                    #expect(providers.apns.received.isEmpty)
                    gate.open()
                    try await eventually("every iPad nudged once APNs answers") { providers.apns.received.count == 5 }
                }
            }
        }
    }

    @Test("a nudger that dies while sending leaves the nudge to another", arguments: Driver.selected)
    func anotherNudgerTakesOver(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 1) { http in
            try await Self.household(http)
            try await Self.withProviders { providers in
                let bobsPhone = String(repeating: "b3", count: 32)
                try await Self.register(http, "bob", "b-phone", Self.apns(bobsPhone))
                let gate = TestGate("APNs answers")
                providers.apns.hold(until: gate)
                let first = Task { try await Self.nudger(http, providers.configuration).run() }
                _ = try await http.results([Op.create("inventory", "milk", ["qty": 1], household: "home")], device: "a-phone")
                try await eventually("the first nudger's request arrived") { providers.apns.arrivals >= 1 }
                // It dies with its request out: nothing records the nudge, which stays leased.
                first.cancel()
                _ = await first.result
                providers.apns.hold(until: nil)
                gate.open()
                #expect(providers.apns.received.isEmpty)
                #expect(try await http.store.queryTexts("SELECT CAST(count(*) AS TEXT) FROM push_registrations WHERE leased_until IS NOT NULL") == ["1"])
                // Its lease ends (NudgeStoreTests move the clock past it; here the row is aged).
                try await http.store.execute("UPDATE push_registrations SET leased_until = 1")
                try await whileRunning(Self.nudger(http, providers.configuration)) {
                    try await eventually("the second nudger sent it") { !providers.apns.received.isEmpty }
                    try await eventually("the nudger settled") { try await Self.settled(http) }
                }
                #expect(providers.apns.received.map(\.deviceToken).allSatisfy { $0 == bobsPhone })
            }
        }
    }
}
