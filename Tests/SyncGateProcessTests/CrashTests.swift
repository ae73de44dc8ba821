import Foundation
import PostgresNIO
import SyncGateCore
import SyncGateWire
import SyncGateStorage
import SyncGateTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Crashes under steady load on a durable PostgreSQL (fsync on): workers and fronts killed with
/// SIGKILL and PostgreSQL stopped with `-m immediate` (recovery from the WAL), round after round,
/// while `syncgate load sync --verify` pushes as a client would (the same push again until
/// answered). At the end a fresh device pulls every user's data: every acknowledged operation is
/// there exactly once.
@Suite(.serialized, .timeLimit(.minutes(15))) struct CrashTests {
    static let secret = HTTPHarness.secret

    /// The crash test's processes run at low CPU priority (`nice` execs the binary: same pid, so
    /// SIGKILL reaches it): on two cores they would otherwise starve the suites running beside
    /// them, whose timing bounds then fail.
    static func niced(_ arguments: [String], environment: [String: String]) throws -> SyncGateProcess {
        try SyncGateProcess(executable: "/usr/bin/nice", ["-n", "15", try SyncGateProcess.binary()] + arguments, environment: environment)
    }

    static func verifyLine(_ log: String) -> String? {
        log.split(separator: "\n").last { $0.hasPrefix("verify: ") }.map(String.init)
    }

    /// The database the crash test stops: a durable PostgreSQL, or under `scripts/citus test` a
    /// durable Citus cluster of its own, its nodes stopped in turn (``TemporaryCitus/crash(round:)``).
    enum Database {
        case postgres(TemporaryPostgres)
        case citus(TemporaryCitus)

        static func make() async throws -> Database {
            TestDatabases.citusWorkers == nil ? .postgres(try await TemporaryPostgres.make(durable: true)) : .citus(try await TemporaryCitus.make())
        }

        var location: DatabaseURL.PostgresLocation {
            switch self {
            case .postgres(let server): server.location
            case .citus(let cluster): cluster.location
            }
        }

        /// Stops the database at once (recovery from the WAL) and starts it; says what stopped.
        func crash(round: Int) async throws -> String {
            switch self {
            case .postgres(let server):
                try await server.stop(immediate: true)
                try await server.start()
                return "PostgreSQL"
            case .citus(let cluster):
                return try await cluster.crash(round: round)
            }
        }

        func destroyInBackground() {
            switch self {
            case .postgres(let server): server.destroyInBackground()
            case .citus(let cluster): cluster.destroyInBackground()
            }
        }
    }

    @Test func killsAndImmediateDatabaseStopsLoseNothingAcknowledged() async throws {
        let server = try await Database.make()
        defer { server.destroyInBackground() }
        // A change webhook receiver hears every change through the crashes (docs/webhooks.md).
        let receiver = WebhookReceiver(secret: nil)
        try await withTestHTTPServer(receiver.router) { receiverPort in
            let environment = [
                "SYNCGATE_DATABASE_URL": server.location.urlString, "SYNCGATE_JWT_SECRET": Self.secret, "SYNCGATE_LEASE": "2s", "SYNCGATE_LOG_LEVEL": "error",
                // An attempt's timeout far above need: the niced worker can wait seconds for a core
                // under stress-ng, and a failed attempt's second retry comes 5 minutes later. A killed
                // worker's attempt is sent again after the timeout + 20 s.
                "SYNCGATE_WEBHOOK_ALLOW_PRIVATE": "true", "SYNCGATE_WEBHOOK_TIMEOUT": "60s",
            ]
            let migrate = try SyncGateProcess(["migrate"], environment: environment)
            #expect(await migrate.waitForExit(timeout: hangGuard) == 0, "\(migrate.log)")
            let subscribe = try SyncGateProcess(
                ["admin", "webhooks", "create", "crash", "--url", "http://127.0.0.1:\(receiverPort)/hook", "--json"], environment: environment
            )
            #expect(await subscribe.waitForExit(timeout: hangGuard) == 0, "\(subscribe.log)")
            let created = subscribe.log.split(separator: "\n").compactMap { try? JSONParser().parse(Array($0.utf8)) }.first
            receiver.expect(secret: try #require(created?["secret"]?.stringValue, "\(subscribe.log)"))

            let port = SyncGateProcess.freePort()
            let client = ProcessClient(base: "http://127.0.0.1:\(port)")
            func front() throws -> SyncGateProcess { try Self.niced(["serve", "--port", "\(port)", "--workers", "0"], environment: environment) }
            func worker() throws -> SyncGateProcess { try Self.niced(["worker", "--concurrency", "2"], environment: environment) }
            var fronts = [try front()]
            var workers = [try worker()]
            defer { for process in fronts + workers { Task { await process.stop() } } }
            try await client.waitUntilReady(fronts[0])

            // The load runs until told to stop (SIGTERM: it then verifies), not for a time a busy
            // machine could spend on the restarts alone.
            let load = try Self.niced(
                ["load", "sync", "--url", "http://127.0.0.1:\(port)", "--users", "3", "--batch", "5", "--duration", "3600", "--verify"], environment: environment
            )
            defer { Task { await load.stop() } }
            // Between faults, the pipeline applies jobs again: 10 more done than before.
            func applying(_ what: String) async throws {
                let before = try await Self.doneJobs(server.location)
                try await eventually("jobs applied \(what)", every: .milliseconds(200)) {
                    (try? await Self.doneJobs(server.location)).map { $0 >= before + 10 } ?? false
                }
            }
            try await applying("under load")
            for round in 1...3 {
                workers.last!.signal(SIGKILL)
                _ = await workers.last!.waitForExit(timeout: hangGuard)
                workers.append(try worker())
                try await applying("after the worker's kill, round \(round)")

                fronts.last!.signal(SIGKILL)
                _ = await fronts.last!.waitForExit(timeout: hangGuard)
                fronts.append(try front())
                try await client.waitUntilReady(fronts.last!)
                try await applying("after the front's kill, round \(round)")

                let stopped = try await server.crash(round: round)
                print("crash round \(round): worker killed, front killed, \(stopped) stopped immediately and started")
                try await applying("after the database's restart, round \(round)")
            }
            load.signal(SIGTERM)
            let status = await load.waitForExit(timeout: .seconds(300))
            let line = Self.verifyLine(load.log)
            print(load.log.split(separator: "\n").suffix(8).joined(separator: "\n"))
            #expect(status == 0, "\(load.log.suffix(2000))")
            let counts = line.map { $0.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .punctuationCharacters)) } } ?? []
            #expect(counts.count == 4 && counts[0] > 0 && counts[0] == counts[1] && counts[2] == 0 && counts[3] == 0, "\(line ?? "no verify line")")

            // Every change the feeds hold reached the receiver once (by webhook-id), each feed in
            // order, signed. (Compaction may have deleted changes the receiver already had.)
            let stored = try await Self.feedPositions(server.location)
            try await eventually("the receiver has every change", timeout: .seconds(480)) {
                Set(Self.positions(receiver.accepted)).isSuperset(of: stored)
            }
            let accepted = receiver.accepted
            let positions = Self.positions(accepted)
            #expect(Set(positions).count == positions.count, "a change delivered under two webhook-ids")
            for scope in Set(accepted.map(\.scope)) {
                let sequences = accepted.filter { $0.scope == scope }.compactMap { $0.change["seq"]?.intValue }
                #expect(sequences == sequences.sorted(), "\(scope) out of order")
            }
            #expect(receiver.deliveries.allSatisfy { $0.signatureValid })
            print("webhooks: \(positions.count) changes in \(receiver.deliveries.count) requests, \(stored.count) in the feeds at the end")
        }
    }

    static func doneJobs(_ location: DatabaseURL.PostgresLocation) async throws -> Int {
        try await withConnection(location) { connection in
            var count = 0
            for try await done in try await connection.query("SELECT count(*)::int FROM jobs WHERE state = 'done'", logger: TestDatabases.logger).decode(Int.self) {
                count = done
            }
            return count
        }
    }

    static func feedPositions(_ location: DatabaseURL.PostgresLocation) async throws -> Set<String> {
        try await withConnection(location) { connection in
            var positions: Set<String> = []
            for try await (scope, seq) in try await connection.query("SELECT scope, seq FROM changes", logger: TestDatabases.logger).decode((String, Int64).self) {
                positions.insert("\(scope):\(seq)")
            }
            return positions
        }
    }

    static func positions(_ accepted: [(scope: String, change: JSONValue)]) -> [String] {
        accepted.map { "\($0.scope):\($0.change["seq"]?.intValue ?? -1)" }
    }

    /// The check itself can fail: changes removed behind the server's back are reported lost,
    /// and the command exits non-zero.
    @Test func verifyReportsWhatWentMissing() async throws {
        let folder = NSTemporaryDirectory() + "syncgate-verify-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let database = "\(folder)/db.sqlite"
        let environment = ["SYNCGATE_DATABASE_URL": "sqlite:\(database)", "SYNCGATE_JWT_SECRET": Self.secret, "SYNCGATE_LOG_LEVEL": "error"]
        let port = SyncGateProcess.freePort()
        let serve = try Self.niced(["serve", "--port", "\(port)"], environment: environment)
        defer { Task { await serve.stop() } }
        try await ProcessClient(base: "http://127.0.0.1:\(port)").waitUntilReady(serve)
        let load = try Self.niced(["load", "sync", "--url", "http://127.0.0.1:\(port)", "--users", "2", "--duration", "3600", "--verify"], environment: environment)
        defer { Task { await load.stop() } }
        // Once some weight logs were applied (on a loaded machine the niced load may take a while
        // to start: a fixed sleep could delete nothing and leave nothing to report).
        try await StoreHarness.withExisting(.sqlite(path: database)) { harness in
            try await eventually("weight logs applied", every: .milliseconds(100)) {
                try await !harness.queryTexts("SELECT entity_id FROM changes WHERE entity_type = 'weightLogs' LIMIT 1").isEmpty
            }
            try await harness.execute("DELETE FROM changes WHERE entity_id IN (SELECT entity_id FROM changes WHERE entity_type = 'weightLogs' LIMIT 3)")
        }
        // Only now does the load stop and verify (at a set duration it could verify before the delete).
        load.signal(SIGTERM)
        let status = await load.waitForExit(timeout: .seconds(120))
        #expect(status != nil && status != 0, "\(load.log.suffix(1000))")
        let line = Self.verifyLine(load.log) ?? ""
        #expect(line.contains(" lost") && !line.contains(" 0 lost"), "\(line)")
    }
}
