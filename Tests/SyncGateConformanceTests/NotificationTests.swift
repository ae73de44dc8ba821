import AsyncHTTPClient
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import NIOHTTP1
import PostgresNIO
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// The notification paths alone: every test runs without the polling safety net
/// (``HTTPHarness/noSafetyNet``), so an answer before its wait ends can only come from a
/// notification (NOTIFY on PostgreSQL, in-process signals on SQLite). A path that breaks shows
/// in what comes back: a push answered 202 when its 30 s wait ends, a long-poll's empty page.
@Suite(.timeLimit(.minutes(10))) struct NotificationTests {
    /// A hang guard for a wake-up, far above the milliseconds it takes: a loaded two-core
    /// machine must not fail a test whose notifications work. (A long-poll's own wait, 55 s,
    /// is longer: a waiter woken by nothing answers after it.)
    static let promptly: Duration = .seconds(45)

    /// "Jobs available" wakes an idle worker; "job finished" answers the waiting push.
    @Test(arguments: Driver.selected)
    func aPushIsAppliedAndAnsweredByNotifications(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 1, notificationsOnly: true) { http in
            for round in 0..<3 {
                let started = ContinuousClock.now
                let pushed = try await http.push([Op.create("weightLogs", "w\(round)", ["kg": 70])], wait: 30_000)
                #expect(pushed.status == 200 && pushed.json?["status"] == "done")
                #expect(started.duration(to: .now) < Self.promptly, "round \(round)")
            }
        }
    }

    /// A feed notification wakes a long-poll.
    @Test(arguments: Driver.selected)
    func aLongPollWakesWhenItsFeedAdvances(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 1, notificationsOnly: true) { http in
            let cursor = try await http.pullAll(device: "tablet").cursor
            let baseline = http.waiters
            async let waiting = http.pull(device: "tablet", query: "cursor=\(cursor)&wait=55000")
            try await http.waitForWaiters(1, beyond: baseline)
            let pushed = try await http.push([Op.create("weightLogs", "w1", ["kg": 70])], device: "phone", wait: 30_000)
            #expect(pushed.status == 200)
            let answered = ContinuousClock.now
            let page = try await waiting
            #expect(answered.duration(to: .now) < Self.promptly)
            #expect(page.json?["changes"]?[0]?["entity_id"] == "w1")
        }
    }

    /// Being added to a household wakes the new member's long-poll (their own feed announces it).
    @Test(arguments: Driver.selected)
    func joiningAHouseholdWakesTheJoiner(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 1, notificationsOnly: true) { http in
            _ = try await http.results([Op.create("households", "home", ["name": "Home"]), Op.create("inventory", "milk", ["q": 1], household: "home")], user: "bob")
            let cursor = try await http.pullAll(user: "alice").cursor
            let baseline = http.waiters
            async let waiting = http.pull(user: "alice", query: "cursor=\(cursor)&wait=55000")
            try await http.waitForWaiters(1, beyond: baseline)
            _ = try await http.results([HouseholdTests.member("home", "alice")], user: "bob")
            let joined = ContinuousClock.now
            let page = try await waiting
            #expect(joined.duration(to: .now) < Self.promptly)
            #expect(page.json?["scopes"]?["added"] == ["home"])
        }
    }

    /// Server-sent pokes come from notifications too (keep-alives are a minute apart here).
    @Test(arguments: Driver.selected)
    func eventsPokeWithoutThePollingNet(_ driver: Driver) async throws {
        var configuration = HTTPHarness.testConfiguration
        configuration.keepAliveInterval = HTTPHarness.noSafetyNet
        try await HTTPHarness.with(driver, setup: .live, configuration: configuration, workers: 1, notificationsOnly: true) { http in
            let port = try #require(http.client.port)
            let baseline = http.waiters
            var events = try await LiveTests.openEvents(port: port, token: try await http.token()).1
            #expect(try await events.nextEvent(timeout: hangGuard)?.hasPrefix(": connected") == true)
            try await http.waitForWaiters(1, beyond: baseline)
            let started = ContinuousClock.now
            _ = try await http.results([Op.create("weightLogs", "w", ["kg": 1])], device: "phone")
            #expect(try await LiveTests.nextPoke(&events, timeout: Self.promptly) == ["household_ids": [], "user": true])
            #expect(started.duration(to: .now) < Self.promptly)
        }
    }

    /// A commit announces its membership changes, then its feed heads, then its jobs: a process
    /// that hears a job finished knows the heads the job advanced (a long-poll's page, whose
    /// watermark is read with the heads, never counts a job whose changes it did not read), and
    /// one that hears a household's feed advance knows who left it in that commit (a removed
    /// member's waiter is not woken to read the household on its old cursor).
    @Test(arguments: Driver.selected)
    func aCommitAnnouncesItsMembershipThenItsHeadsThenItsJobs(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 1, notificationsOnly: true) { http in
            if case .postgres(let location) = http.store.url {
                try await eventually("the listener connected") { try await Self.listeners(location) == 1 }
            }
            let subscription = http.store.store.notifier.subscribe(.init(feeds: true))
            defer { subscription.cancel() }
            let pushed = try await http.push([Op.create("weightLogs", "w1", ["kg": 70])], device: "phone", wait: 30_000)
            #expect(pushed.status == 200)
            func isJob(_ event: StoreEvent) -> Bool {
                if case .jobFinished = event { return true }
                return false
            }
            var heard: [StoreEvent] = []
            let deadline = ContinuousClock.now + Self.promptly
            while !heard.contains(where: isJob), let events = await subscription.next(timeout: ContinuousClock.now.duration(to: deadline)) {
                heard += events
            }
            let head = heard.firstIndex(of: .feedAdvanced(.user("alice"), head: 1))
            let job = heard.firstIndex(where: isJob)
            #expect(head != nil && job != nil, "\(heard)")
            if let head, let job { #expect(head < job, "\(heard)") }

            // The owner removes bob and writes in one job: bob's membership change comes first.
            _ = try await http.results([Op.create("households", "home", ["name": "Home"]), HouseholdTests.member("home", "bob")], user: "olive")
            let again = http.store.store.notifier.subscribe(.init(feeds: true))
            defer { again.cancel() }
            _ = try await http.results(
                [Op.delete("household_members", "home:bob", base: 1, household: "home"), Op.create("inventory", "secret", ["quantity": 1], household: "home")],
                user: "olive"
            )
            heard = []
            while !heard.contains(where: isJob), let events = await again.next(timeout: ContinuousClock.now.duration(to: deadline)) {
                heard += events
            }
            let left = heard.firstIndex { if case .scopesChanged(userID: "bob", _) = $0 { return true } else { return false } }
            let household = heard.firstIndex { if case .feedAdvanced(.household("home"), _) = $0 { return true } else { return false } }
            #expect(left != nil && household != nil, "\(heard)")
            if let left, let household { #expect(left < household, "\(heard)") }
        }
    }

    /// The LISTEN connection dies; a change commits while it is away, so its NOTIFY is lost. When
    /// the listener is back it resynchronizes every waiter, which finds the change long before the
    /// safety net would have; pokes and wake-ups work again afterwards.
    @Test(arguments: Driver.selected.filter { $0 == .postgres })
    func theListenerReconnectsAndResynchronizesWaiters(_ driver: Driver) async throws {
        var configuration = HTTPHarness.testConfiguration
        configuration.keepAliveInterval = HTTPHarness.noSafetyNet
        try await HTTPHarness.with(
            driver, setup: .live, configuration: configuration, workers: 1, notificationsOnly: true, listenerReconnectDelay: .seconds(2)
        ) { http in
            guard case .postgres(let location) = http.store.url else { return }
            let port = try #require(http.client.port)
            let cursor = try await http.pullAll(device: "tablet").cursor
            // The listener connects beside the first requests, not before them.
            try await eventually("the listener connected") { try await Self.listeners(location) == 1 }

            let baseline = http.waiters
            var events = try await LiveTests.openEvents(port: port, token: try await http.token()).1
            _ = try await events.nextEvent(timeout: hangGuard)
            async let waiting = http.pull(device: "tablet", query: "cursor=\(cursor)&wait=55000")
            try await http.waitForWaiters(2, beyond: baseline)

            #expect(try await withConnection(location) {
                try await $0.integer(
                    "SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE application_name = 'syncgate listener' AND datname = current_database()"
                )
            } == 1)
            try await eventually("the listener to be gone", every: .milliseconds(10)) { try await Self.listeners(location) == 0 }
            // Committed while nobody listens: this NOTIFY is lost.
            _ = try await http.store.apply([Op.create("weightLogs", "while-away", ["kg": 1])])
            let committed = ContinuousClock.now
            let page = try await waiting
            #expect(page.json?["changes"]?[0]?["entity_id"] == "while-away")
            #expect(committed.duration(to: .now) < Self.promptly, "woken by the listener's resynchronization before the long-poll's wait ended")
            #expect(try await Self.listeners(location) == 1)
            // The stream is poked by the resynchronization too, then by a fresh change.
            #expect(try await LiveTests.nextPoke(&events, timeout: hangGuard) != nil)
            _ = try await http.results([Op.create("weightLogs", "after", ["kg": 1])], device: "phone")
            let started = ContinuousClock.now
            var poked = false
            while !poked, started.duration(to: .now) < Self.promptly {
                poked = try await LiveTests.nextPoke(&events, timeout: Self.promptly)?["user"] == true
            }
            #expect(poked)
        }
    }

    /// The LISTEN connection uses the pool's `sslmode`: on a server that refuses clear-text TCP,
    /// with `require` (encrypted, certificate unchecked) and with `verify-full` against the
    /// server's own certificate, the listener connects over TLS and notifications arrive.
    @Test(arguments: ["require", "verify-full"])
    func theListenerHonoursSslmode(_ mode: String) async throws {
        guard Driver.selected.contains(.postgres) else { return }
        let server = try await TemporaryPostgres.make(tls: true)
        defer { server.destroyInBackground() }
        var location = server.location
        location.host = "localhost"
        location.tlsMode = mode
        if mode == "verify-full" { location.tlsRootCertificate = server.certificatePath }
        try await StoreHarness.withExisting(.postgres(location)) { harness in
            let socket = server.socketLocation
            try await eventually("the listener to connect over TLS") {
                try await withConnection(socket) {
                    try await $0.integer(
                        "SELECT count(*)::int FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = 'syncgate listener' AND s.ssl"
                    )
                } == 1
            }
            let subscription = harness.store.notifier.subscribe(.init(feeds: true))
            defer { subscription.cancel() }
            _ = try await harness.apply([Op.create("weightLogs", "w1", ["kg": 1])])
            #expect(await Self.hears(.feedAdvanced(.user("alice"), head: 1), on: subscription), "the feed's NOTIFY reached the process over the TLS listener")
        }
    }

    /// A push's enqueue commits while another transaction holds PostgreSQL's notify lock, and
    /// workers still hear of the job once the lock is free.
    ///
    /// Every transaction that sent a NOTIFY holds one database-wide lock until its commit is
    /// flushed, so an enqueue that notified in its own transaction committed one flush after
    /// another with every other push (migration 0008). Here a transaction that notified waits at
    /// its commit for a synchronous standby that never comes, holding the lock: an enqueue that
    /// notifies waits behind it until its deadline.
    @Test func anEnqueueDoesNotWaitForTheNotifyLock() async throws {
        guard Driver.selected.contains(.postgres) else { return }
        let server = try await TemporaryPostgres.make()
        defer { server.destroyInBackground() }
        // Only sessions that ask for `synchronous_commit = on` wait for the (absent) standby.
        for setting in [
            "ALTER SYSTEM SET synchronous_commit = 'local'", "ALTER SYSTEM SET synchronous_standby_names = 'nobody'", "SELECT pg_reload_conf()",
            "CREATE TABLE held (x integer)",
        ] {
            try await TestDatabases.execute(setting, on: server.location)
        }
        try await StoreHarness.withExisting(.postgres(server.location)) { harness in
            let location = server.location
            try await eventually("the listener to listen") { try await Self.listening(location) }
            let subscription = harness.store.notifier.subscribe(.init(jobsAvailable: true))
            defer { subscription.cancel() }
            let holder = Task {
                // The checkpointer takes up the standby setting shortly after the reload: until
                // then such a commit does not wait, so notify again until one does.
                try await withConnection(location) { connection in
                    try await connection.query("SET synchronous_commit = on", logger: TestDatabases.logger)
                    for _ in 0..<600 {
                        // It writes (a transaction that wrote nothing else commits without a flush).
                        try await connection.query("BEGIN", logger: TestDatabases.logger)
                        try await connection.query("INSERT INTO held VALUES (1)", logger: TestDatabases.logger)
                        try await connection.query("SELECT pg_notify('elsewhere', 'held')", logger: TestDatabases.logger)
                        try await connection.query("COMMIT", logger: TestDatabases.logger)
                        try await Task.sleep(for: .milliseconds(50))
                    }
                }
            }
            defer { holder.cancel() }
            let socket = server.socketLocation
            try await eventually("a notifying commit to wait for the standby") {
                try await withConnection(socket) { try await $0.integer("SELECT count(*)::int FROM pg_stat_activity WHERE wait_event = 'SyncRep'") } == 1
            }
            let started = ContinuousClock.now
            _ = try await harness.push([Op.create("weightLogs", "w1", ["kg": 70])])
            #expect(started.duration(to: .now) < Self.promptly, "the enqueue waited for the notify lock")
            // The lock freed, the announcement that waited for it reaches the workers.
            _ = try await withConnection(socket) { try await $0.integer("SELECT count(*)::int FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep') t") }
            #expect(await Self.hears(.jobsAvailable, on: subscription), "workers heard of the queued job")
        }
    }

    /// An enqueue whose request gave up waiting (its deadline passed while the statement waited
    /// for the user's queue lock) still commits when the lock is freed — and its job is still
    /// announced then, as its NOTIFY used to commit with it.
    @Test func anEnqueueThatOutlivesItsDeadlineIsStillAnnounced() async throws {
        guard Driver.selected.contains(.postgres) else { return }
        let url = DatabaseURL.postgres(try await TestDatabases.shared.freshPostgres())
        guard case .postgres(let location) = url else { return }
        // A request gives up on the database after its deadline (the server's is 5 s; here long
        // enough for the statement to reach PostgreSQL on a loaded machine before it passes).
        try await StoreHarness.withExisting(url, productionDeadlines: true, requestDeadline: .seconds(20)) { harness in
            try await eventually("the listener to listen") { try await Self.listening(location) }
            let subscription = harness.store.notifier.subscribe(.init(jobsAvailable: true))
            defer { subscription.cancel() }
            let locked = AsyncStream.makeStream(of: Void.self)
            let release = AsyncStream.makeStream(of: Void.self)
            // Holds alice's enqueue lock (migration 0004's advisory lock) until told to let go.
            let holder = Task {
                try await withConnection(location) { connection in
                    try await connection.query("BEGIN", logger: TestDatabases.logger)
                    try await connection.query("SELECT pg_advisory_xact_lock(1397182805, hashtext('alice'))", logger: TestDatabases.logger)
                    locked.continuation.yield()
                    for await _ in release.stream { break }
                    try await connection.query("COMMIT", logger: TestDatabases.logger)
                }
            }
            defer { holder.cancel() }
            for await _ in locked.stream { break }
            let push = Task { _ = try await harness.push([Op.create("weightLogs", "w1", ["kg": 70])]) }
            try await eventually("the enqueue to wait for the lock in PostgreSQL") {
                try await withConnection(location) {
                    try await $0.integer("SELECT count(*)::int FROM pg_stat_activity WHERE wait_event = 'advisory' AND datname = current_database()")
                } == 1
            }
            await #expect(throws: StoreUnavailableError.self) { try await value(of: push, "the push to fail") }
            release.continuation.yield()
            try await value(of: holder, "the holder to finish")
            try await eventually("the late enqueue to commit") {
                try await harness.queryTexts("SELECT count(*)::text FROM jobs") == ["1"]
            }
            #expect(await Self.hears(.jobsAvailable, on: subscription), "workers heard of the job its enqueue committed after the request gave up")
        }
    }

    /// Whether `subscription` receives `event` within ``promptly``.
    static func hears(_ event: StoreEvent, on subscription: ChangeSubscription) async -> Bool {
        let deadline = ContinuousClock.now + promptly
        while ContinuousClock.now < deadline {
            // A finished subscription hears nothing more: no spinning until the deadline.
            guard let events = await subscription.next(timeout: ContinuousClock.now.duration(to: deadline)) else { return false }
            if events.contains(event) { return true }
        }
        return false
    }

    /// Whether the store's listener has run LISTEN (it runs no other statement for its first 15 s).
    static func listening(_ location: DatabaseURL.PostgresLocation) async throws -> Bool {
        try await withConnection(location) {
            try await $0.integer(
                // Its last statement is LISTEN, or the liveness ping it sends every 15 s once
                // listening (a loaded machine reached this check after the first ping, once).
                """
                SELECT count(*)::int FROM pg_stat_activity WHERE application_name = 'syncgate listener' AND datname = current_database()
                  AND state = 'idle' AND (query ILIKE 'LISTEN%' OR query = 'SELECT 1')
                """
            )
        } == 1
    }

    /// A front of a release before migration 0008 passes `syncgate_enqueue` a notification: the
    /// function still sends it with the insert, so such a front's pushes still wake the workers
    /// during a rolling upgrade. (This release passes none: `anEnqueueDoesNotWaitForTheNotifyLock`.)
    @Test func anOlderFrontsEnqueueStillNotifies() async throws {
        guard Driver.selected.contains(.postgres) else { return }
        try await StoreHarness.with(.postgres) { harness in
            guard case .postgres(let location) = harness.url else { return }
            try await eventually("the listener to listen") { try await Self.listening(location) }
            let subscription = harness.store.notifier.subscribe(.init(jobsAvailable: true))
            defer { subscription.cancel() }
            // The call a front before 0008 makes (EnqueueStatement then: the notification is "queue").
            let queued = try await harness.queryTexts(
                "SELECT job_id::text FROM syncgate_enqueue('alice', 'd1', 5, 1, '{}', now(), 100, 'syncgate_events', 'queue')"
            )
            #expect(queued.count == 1)
            #expect(await Self.hears(.jobsAvailable, on: subscription), "the older front's enqueue announced its job")
        }
    }

    static func listeners(_ location: DatabaseURL.PostgresLocation) async throws -> Int {
        try await withConnection(location) {
            try await $0.integer("SELECT count(*)::int FROM pg_stat_activity WHERE application_name = 'syncgate listener' AND datname = current_database()")
        }
    }
}
