import AsyncHTTPClient
import Foundation
import NIOHTTP1
import PostgresNIO
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateStorage
import SyncGateServer
import SyncGateTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The real `syncgate` binary as separate processes on PostgreSQL.
@Suite(.serialized, .timeLimit(.minutes(10))) struct ProcessTests {
    static let secret = HTTPHarness.secret

    /// Invariant 1: a worker killed mid-job loses nothing and applies nothing twice, on a durable
    /// PostgreSQL (fsync and synchronous commit on).
    @Test func aWorkerKilledMidJobIsReclaimedAndAppliesOnce() async throws {
        let server = try await TemporaryPostgres.make(durable: true)
        defer { server.destroyInBackground() }
        let location = server.location
        try await StoreHarness.withExisting(.postgres(location)) { harness in
            let operations = [
                Op.create("weightLogs", "w1", ["kg": 70], key: "first"),
                Op.create("foodLogs", "f1", ["loggedDate": "2026-01-15", "mealType": "lunch", "items": [["id": "a", "calories": 500]]], key: "second"),
                Op.create("contacts", "c1", ["name": "Ada"], key: "last"),
            ]
            let id = try await harness.push(operations)

            // Hold the idempotency key the job inserts last: the worker will write its entities,
            // changes and feed head, then block on this row, inside its transaction.
            try await withConnection(location) { blocker in
                try await blocker.query("BEGIN", logger: TestDatabases.logger)
                try await blocker.query("INSERT INTO applied_operations (user_id, idempotency_key, version) VALUES ('alice', 'last', 0)", logger: TestDatabases.logger)

                let environment = ["SYNCGATE_DATABASE_URL": location.urlString, "SYNCGATE_LEASE": "2s", "SYNCGATE_JWT_SECRET": Self.secret]
                let doomed = try SyncGateProcess(["worker", "--concurrency", "1"], environment: environment)
                defer { Task { await doomed.stop() } }
                try await Self.waitFor("the worker to block inside the job", timeout: hangGuard, log: doomed) {
                    // A separate connection: inside a transaction pg_stat_activity is a cached snapshot.
                    // Only the worker's apply can wait for a lock here (its one statement's text is
                    // longer than pg_stat_activity keeps).
                    let waiting = try await withConnection(location) {
                        try await $0.integer(
                            "SELECT count(*)::int FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
                        )
                    }
                    return waiting == 1
                }
                let running = try #require(try await harness.store.job(id: id, userID: "alice"))
                #expect(running.state == .running && running.attempts == 1)

                doomed.signal(SIGKILL)
                #expect(await doomed.waitForExit(timeout: hangGuard) != nil)
                try await blocker.query("ROLLBACK", logger: TestDatabases.logger)
            }

            // Nothing of the killed attempt is visible.
            #expect(try await harness.pullAll().changes.isEmpty)
            let environment = ["SYNCGATE_DATABASE_URL": location.urlString, "SYNCGATE_LEASE": "2s", "SYNCGATE_JWT_SECRET": Self.secret]
            let healthy = try SyncGateProcess(["worker", "--concurrency", "1"], environment: environment)
            defer { Task { await healthy.stop() } }
            let job = try await harness.waitFinished(id)
            #expect(job.state == .done)
            #expect(job.attempts == 2)
            #expect(try job.decodedResults()?.map(\.outcome) == ["applied", "applied", "applied"])
            let changes = try await harness.pullAll().changes
            #expect(changes.map(\.entityID).sorted() == ["2026-01-15", "c1", "f1", "w1"])
            #expect(changes.allSatisfy { $0.version == 1 })
            let recorded = try await withConnection(location) { try await $0.integer("SELECT count(*)::int FROM applied_operations") }
            #expect(recorded == 3)
        }
    }

    /// SIGTERM drains: a worker finishes the job in hand before it exits.
    @Test func sigtermLetsAWorkerFinishItsJob() async throws {
        let location = try await TestDatabases.shared.freshPostgres()
        try await StoreHarness.withExisting(.postgres(location)) { harness in
            let id = try await harness.push([Op.create("weightLogs", "w1", ["kg": 70], key: "held")])
            let environment = ["SYNCGATE_DATABASE_URL": location.urlString, "SYNCGATE_JWT_SECRET": Self.secret]
            try await withConnection(location) { blocker in
                try await blocker.query("BEGIN", logger: TestDatabases.logger)
                try await blocker.query("INSERT INTO applied_operations (user_id, idempotency_key) VALUES ('alice', 'held')", logger: TestDatabases.logger)
                let worker = try SyncGateProcess(["worker"], environment: environment)
                defer { Task { await worker.stop() } }
                try await Self.waitFor("the job to be in hand", timeout: hangGuard, log: worker) {
                    try await harness.store.job(id: id, userID: "alice")?.state == .running
                }
                worker.signal(SIGTERM)
                // It has taken the signal, and still runs: it waits for its job.
                try await Self.waitFor("the worker to begin stopping", timeout: hangGuard, log: worker) { worker.log.contains("worker stopping") }
                #expect(worker.isRunning, "the worker must wait for its job")
                // Let the job through (our row disappears, so the worker's insert succeeds).
                try await blocker.query("ROLLBACK", logger: TestDatabases.logger)
                let status = await worker.waitForExit(timeout: hangGuard)
                #expect(status == 0, "\(worker.log)")
            }
            #expect(try await harness.store.job(id: id, userID: "alice")?.state == .done)
        }
    }

    /// Two fronts start together on an empty database (both migrate safely) and two workers apply
    /// the pushes of many users at once, sent alternately to either front: every push applies, in
    /// each user's push order, a shared household's feed holds every member's change, and both
    /// workers did part of the work.
    @Test func twoFrontsAndTwoWorkersServeManyUsersAtOnce() async throws {
        let location = try await TestDatabases.shared.freshEmptyPostgres()
        let environment = ["SYNCGATE_DATABASE_URL": location.urlString, "SYNCGATE_JWT_SECRET": Self.secret]
        let ports = [SyncGateProcess.freePort(), SyncGateProcess.freePort()]
        let fronts = try ports.map { try SyncGateProcess(["serve", "--port", "\($0)", "--workers", "0"], environment: environment) }
        var debug = environment
        debug["SYNCGATE_LOG_LEVEL"] = "debug"
        let workers = try (0..<2).map { _ in try SyncGateProcess(["worker", "--concurrency", "2"], environment: debug) }
        defer { Task { for process in fronts + workers { await process.stop() } } }
        let clients = ports.map { ProcessClient(base: "http://127.0.0.1:\($0)") }
        for (client, front) in zip(clients, fronts) { try await client.waitUntilReady(front) }

        let authority = await TokenAuthority(secret: Self.secret)
        let users = (0..<10).map { "user\($0)" }
        var tokens: [String: String] = [:]
        for user in users { tokens[user] = try await authority.issue(userID: user, ttlSeconds: 600) }
        var setup = [Op.create("households", "shared", ["name": "Shared"])]
        setup += users.dropFirst().map { Op.create("household_members", "shared:\($0)", ["user_id": .string($0), "role": "member"]) }
        let created = try await clients[0].request(.POST, "/v1/sync/push?wait=30000", token: tokens[users[0]], device: "phone", body: ProcessClient.pushBody(setup))
        #expect(created.status == 200)

        let rounds = 4
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, user) in users.enumerated() {
                let token = tokens[user]!
                group.addTask {
                    for round in 0..<rounds {
                        let counter = round == 0
                            ? Op.create("weightLogs", "counter", ["n": 0])
                            : Op.update("weightLogs", "counter", base: Int64(round), ["n": .int(Int64(round))])
                        let body = ProcessClient.pushBody([counter, Op.create("inventory", "\(user)-\(round)", ["n": 1], household: "shared")])
                        let response = try await clients[(index + round) % 2].request(.POST, "/v1/sync/push?wait=30000", token: token, device: "phone", body: body)
                        #expect(response.status == 200, "\(user) round \(round): \(String(describing: response.json))")
                        #expect(response.json?["results"]?.arrayValue?.map { $0["status"] } == ["applied", "applied"], "\(user) round \(round)")
                    }
                }
            }
            try await group.waitForAll()
        }
        for user in users {
            let pulled = try await clients[1].request(.GET, "/v1/sync/pull?limit=1000", token: tokens[user], device: "tablet")
            let changes = pulled.json?["changes"]?.arrayValue ?? []
            // Not compacted yet: every version of the counter, in push order.
            #expect(changes.filter { $0["entity_id"] == "counter" }.map { $0["version"] } == (1...rounds).map { .int(Int64($0)) }, "\(user)")
            let shared = changes.filter { $0["entity_type"] == "inventory" }
            #expect(shared.count == users.count * rounds, "\(user) sees every member's change")
        }
        let done = try await withConnection(location) { try await $0.integer("SELECT count(*)::int FROM jobs WHERE state = 'done' AND attempts = 1") }
        #expect(done == 1 + users.count * rounds)
        for worker in workers {
            #expect(worker.log.components(separatedBy: "job applied").count > 1, "each worker applied some of the jobs")
        }
        for front in fronts { front.signal(SIGTERM) }
        for front in fronts { #expect(await front.waitForExit(timeout: hangGuard) == 0) }
    }

    /// `syncgate load live` (the live-connections benchmark) runs end to end on a small scale:
    /// idle connections in two child processes, household members woken by pushes, the front's
    /// CPU and the database's counters read. The numbers are the benchmark's; here only that
    /// every member was reached.
    @Test func theLiveLoadBenchmarkRuns() async throws {
        let location = try await TestDatabases.shared.freshPostgres()
        let port = SyncGateProcess.freePort()
        let environment = ["SYNCGATE_DATABASE_URL": location.urlString, "SYNCGATE_JWT_SECRET": Self.secret]
        let front = try SyncGateProcess(["serve", "--port", "\(port)", "--workers", "2"], environment: environment)
        defer { Task { await front.stop() } }
        try await ProcessClient(base: "http://127.0.0.1:\(port)").waitUntilReady(front)
        let load = try SyncGateProcess([
            "load", "live", "--url", "http://127.0.0.1:\(port)", "--long-polls", "30", "--streams", "10", "--users", "10", "--households", "2",
            "--members", "20", "--pushes", "2", "--idle-seconds", "2", "--processes", "2", "--front-pid", "\(front.pid)", "--stats-url", location.urlString,
        ], environment: environment)
        defer { Task { await load.stop() } }
        #expect(await load.waitForExit(timeout: hangGuard) == 0, "\(load.log)")
        #expect(load.log.contains("idle connections open: 40"), "\(load.log)")
        #expect(load.log.contains("front CPU") && load.log.contains("transactions/s"), "\(load.log)")
        #expect(load.log.contains("household push → 20 members") && load.log.contains("missed: 0"), "\(load.log)")
    }

    /// SIGTERM drains a front: a long-poll in flight answers at once (an empty page, 200), a push
    /// waiting for its job answers 202 with the job id (it is durable), and the process exits 0
    /// long before either's wait would have run out.
    @Test func sigtermDrainsAFrontsRequestsInFlight() async throws {
        let location = try await TestDatabases.shared.freshPostgres()
        let port = SyncGateProcess.freePort()
        let front = try SyncGateProcess(
            ["serve", "--port", "\(port)", "--workers", "0"],
            environment: ["SYNCGATE_DATABASE_URL": location.urlString, "SYNCGATE_JWT_SECRET": Self.secret]
        )
        defer { Task { await front.stop() } }
        let client = ProcessClient(base: "http://127.0.0.1:\(port)")
        try await client.waitUntilReady(front)
        let token = try await TokenAuthority(secret: Self.secret).issue(userID: "alice", ttlSeconds: 600)
        let cursor = try #require(try await client.request(.GET, "/v1/sync/pull", token: token, device: "tablet").json?["cursor"]?.stringValue)

        async let pull = client.request(.GET, "/v1/sync/pull?cursor=\(cursor)&wait=60000", token: token, device: "tablet")
        async let push = client.request(.POST, "/v1/sync/push?wait=30000", token: token, device: "phone", body: ProcessClient.pushBody([Op.create("weightLogs", "w", ["kg": 1])]))
        // The push is in hand once its job exists (no worker runs, so it waits for one); the
        // long-poll was sent before it.
        try await Self.waitFor("the push to be queued", timeout: hangGuard, log: front) {
            try await withConnection(location) { try await $0.integer("SELECT count(*)::int FROM jobs") } == 1
        }
        let draining = ContinuousClock.now
        front.signal(SIGTERM)
        let (polled, pushed) = try await (pull, push)
        // Answered by the drain (milliseconds), not when their waits (30 s, 60 s) ran out.
        #expect(draining.duration(to: .now) < .seconds(25))
        #expect(polled.status == 200 && polled.json?["changes"] == [])
        #expect(pushed.status == 202 && pushed.json?["job_id"] != nil, "\(String(describing: pushed.json))")
        #expect(await front.waitForExit(timeout: hangGuard) == 0, "\(front.log)")
    }

    /// `syncgate admin retry-dead` sends dead jobs back to the queue, where a worker applies them.
    @Test func retryDeadThroughTheCommandLine() async throws {
        let location = try await TestDatabases.shared.freshPostgres()
        try await StoreHarness.withExisting(.postgres(location)) { harness in
            let id = try await harness.push([Op.create("weightLogs", "w1", ["kg": 70])])
            let job = try #require(try await harness.store.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 30_000).first)
            try await harness.store.fail(job, error: "broken", settlement: .dead(results: []))
            let environment = ["SYNCGATE_DATABASE_URL": location.urlString, "SYNCGATE_JWT_SECRET": Self.secret]
            let admin = try SyncGateProcess(["admin", "retry-dead", "--job", "\(id)"], environment: environment)
            #expect(await admin.waitForExit(timeout: hangGuard) == 0, "\(admin.log)")
            #expect(admin.log.contains("queued 1 dead job(s) again"))
            let worker = try SyncGateProcess(["worker", "--concurrency", "1"], environment: environment)
            defer { Task { await worker.stop() } }
            let done = try await harness.waitFinished(id)
            #expect(try done.state == .done && done.decodedResults()?.map(\.outcome) == ["applied"])
        }
    }

    static func waitFor(_ what: String, timeout: Duration, log process: SyncGateProcess? = nil, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestEnvironmentError(description: "timed out waiting for \(what); process log:\n\(process?.log ?? "-")")
    }
}

extension JSONValue {
    subscript(index: Int) -> JSONValue? {
        guard let array = arrayValue, array.indices.contains(index) else { return nil }
        return array[index]
    }
}
