import AsyncHTTPClient
import Foundation
import NIOHTTP1
import PostgresNIO
import SyncGateCore
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The real `syncgate` binary as separate processes on PostgreSQL.
@Suite(.serialized) struct ProcessTests {
    static let secret = HTTPHarness.secret

    /// Invariant 1: a worker killed mid-job loses nothing and applies nothing twice.
    @Test func aWorkerKilledMidJobIsReclaimedAndAppliesOnce() async throws {
        let location = try await TestDatabases.shared.freshPostgres()
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
                try await Self.waitFor("the worker to block inside the job", timeout: .seconds(60), log: doomed) {
                    // A separate connection: inside a transaction pg_stat_activity is a cached snapshot.
                    let waiting = try await withConnection(location) {
                        try await $0.integer(
                            "SELECT count(*)::int FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO applied_operations%'"
                        )
                    }
                    return waiting == 1
                }
                let running = try #require(try await harness.store.job(id: id, userID: "alice"))
                #expect(running.state == .running && running.attempts == 1)

                doomed.signal(SIGKILL)
                #expect(await doomed.waitForExit(timeout: .seconds(10)) != nil)
                try await blocker.query("ROLLBACK", logger: TestDatabases.logger)
            }

            // Nothing of the killed attempt is visible.
            #expect(try await harness.pullAll().changes.isEmpty)
            let environment = ["SYNCGATE_DATABASE_URL": location.urlString, "SYNCGATE_LEASE": "2s", "SYNCGATE_JWT_SECRET": Self.secret]
            let healthy = try SyncGateProcess(["worker", "--concurrency", "1"], environment: environment)
            defer { Task { await healthy.stop() } }
            let job = try await harness.waitFinished(id, timeout: .seconds(60))
            #expect(job.state == .done)
            #expect(job.attempts == 2)
            #expect(job.results?.map(\.outcome) == ["applied", "applied", "applied"])
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
                try await Self.waitFor("the job to be in hand", timeout: .seconds(60), log: worker) {
                    try await harness.store.job(id: id, userID: "alice")?.state == .running
                }
                worker.signal(SIGTERM)
                try await Task.sleep(for: .milliseconds(700))
                #expect(worker.isRunning, "the worker must wait for its job")
                // Let the job through (our row disappears, so the worker's insert succeeds).
                try await blocker.query("ROLLBACK", logger: TestDatabases.logger)
                let status = await worker.waitForExit(timeout: .seconds(30))
                #expect(status == 0, "\(worker.log)")
            }
            #expect(try await harness.store.job(id: id, userID: "alice")?.state == .done)
        }
    }

    /// The issue's "done when": two fronts start together on an empty database (both migrate
    /// safely), two workers apply, one device pushes and another pulls, all over HTTP.
    @Test func twoFrontsAndTwoWorkersServeOneDatabase() async throws {
        let location = try await TestDatabases.shared.freshEmptyPostgres()
        let environment = ["SYNCGATE_DATABASE_URL": location.urlString, "SYNCGATE_JWT_SECRET": Self.secret]
        let ports = [SyncGateProcess.freePort(), SyncGateProcess.freePort()]
        let fronts = try ports.map { try SyncGateProcess(["serve", "--port", "\($0)", "--workers", "0"], environment: environment) }
        let workers = try (0..<2).map { _ in try SyncGateProcess(["worker", "--concurrency", "2"], environment: environment) }
        defer { Task { for process in fronts + workers { await process.stop() } } }
        let clients = ports.map { ProcessClient(base: "http://127.0.0.1:\($0)") }
        for (client, front) in zip(clients, fronts) { try await client.waitUntilReady(front) }

        let token = try await TokenAuthority(secret: Self.secret).issue(userID: "alice", ttlSeconds: 600)
        var expected: Set<String> = []
        for index in 0..<20 {
            let body = ProcessClient.pushBody([Op.create("weightLogs", "w\(index)", ["kg": .int(Int64(index))])])
            let response = try await clients[index % 2].request(.POST, "/v1/sync/push?wait=20000", token: token, device: "phone", body: body)
            #expect(response.status == 200, "\(String(describing: response.json))")
            #expect(response.json?["results"]?[0]?["status"] == "applied")
            expected.insert("w\(index)")
        }
        let pulled = try await clients[1].request(.GET, "/v1/sync/pull", token: token, device: "tablet")
        #expect(pulled.status == 200)
        #expect(Set(pulled.json?["changes"]?.arrayValue?.compactMap { $0["entity_id"]?.stringValue } ?? []) == expected)
        let done = try await withConnection(location) { try await $0.integer("SELECT count(*)::int FROM jobs WHERE state = 'done'") }
        #expect(done == 20)
        for front in fronts { front.signal(SIGTERM) }
        for front in fronts { #expect(await front.waitForExit(timeout: .seconds(20)) == 0) }
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
