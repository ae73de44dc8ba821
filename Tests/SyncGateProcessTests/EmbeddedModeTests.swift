import AsyncHTTPClient
import Foundation
import NIOHTTP1
import SyncGateCore
import SyncGateWire
import SyncGateTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `syncgate serve` with no configuration at all: SQLite in ./data and a development secret.
@Suite(.serialized, .timeLimit(.minutes(10))) struct EmbeddedModeTests {
    /// Runs the binary in `folder` with no SYNCGATE_* settings inherited.
    /// The test process's environment without any `SYNCGATE_` setting: what a new user has.
    static var plainEnvironment: [String: String] {
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SYNCGATE_") || $0.key.hasPrefix("SYNCGATE_TEST") || $0.key == "SYNCGATE_BINARY" }
        environment["SYNCGATE_LOG_LEVEL"] = "info"
        return environment
    }

    static func start(_ arguments: [String], in folder: String) throws -> SyncGateProcess {
        try SyncGateProcess(arguments, environment: plainEnvironment, directory: folder, replaceEnvironment: true)
    }

    static func freshFolder() throws -> String {
        let folder = NSTemporaryDirectory() + "syncgate-embedded-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        return folder
    }

    /// The token the server logged for the user `dev`.
    static func loggedDevToken(_ log: String) -> String? {
        guard let line = log.split(separator: "\n").first(where: { $0.contains("a token for the user 'dev'") }) else { return nil }
        return line.split(separator: " ").last.map(String.init)
    }

    @Test func restartingServeKeepsDataAndTheDevelopmentSecret() async throws {
        let folder = try Self.freshFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let port = SyncGateProcess.freePort()
        let client = ProcessClient(base: "http://127.0.0.1:\(port)")
        var server = try Self.start(["serve", "--port", "\(port)"], in: folder)
        try await client.waitUntilReady(server)
        #expect(FileManager.default.fileExists(atPath: folder + "/data/syncgate.sqlite"))
        #expect(FileManager.default.fileExists(atPath: folder + "/data/jwt-secret"))
        let attributes = try FileManager.default.attributesOfItem(atPath: folder + "/data/jwt-secret")
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        #expect(server.log.contains("development secret"))
        // Nothing else to warn a new user about: no read of the database before it is created
        // (the live waiters' first read once logged "no such table: feeds").
        let warnings = server.log.split(separator: "\n").filter { $0.contains(" warning ") || $0.contains(" error ") }
        #expect(warnings.count == 1 && warnings.allSatisfy { $0.contains("development secret") }, "\(warnings)")
        let devToken = try #require(Self.loggedDevToken(server.log))

        // `syncgate token` run in the same folder signs with the same secret.
        let minted = try Self.start(["token", "--user", "alice"], in: folder)
        #expect(await minted.waitForExit(timeout: hangGuard) == 0)
        let token = try #require(minted.log.split(separator: "\n").last.map(String.init))

        let body = ProcessClient.pushBody([Op.create("weightLogs", "w1", ["kg": 70], key: "k1")])
        let pushed = try await client.request(.POST, "/v1/sync/push", token: token, device: "phone", body: body)
        #expect(pushed.status == 200 && pushed.json?["results"]?[0]?["status"] == "applied")
        #expect(try await client.request(.GET, "/v1/sync/pull", token: devToken, device: "d").status == 200)

        server.signal(SIGTERM)
        #expect(await server.waitForExit(timeout: hangGuard) == 0)

        // Start again: the data, the secret and therefore the tokens are still good.
        server = try Self.start(["serve", "--port", "\(port)"], in: folder)
        try await client.waitUntilReady(server)
        let pulled = try await client.request(.GET, "/v1/sync/pull", token: token, device: "tablet")
        #expect(pulled.status == 200)
        #expect(pulled.json?["changes"]?[0]?["entity_id"] == "w1")
        #expect(try await client.request(.GET, "/v1/sync/pull", token: devToken, device: "d").status == 200)
        let replay = try await client.request(.POST, "/v1/sync/push", token: token, device: "phone", body: body)
        #expect(replay.json?["results"]?[0]?["status"] == "duplicate")
        server.signal(SIGTERM)
        #expect(await server.waitForExit(timeout: hangGuard) == 0)
    }

    @Test func aWorkerProcessExplainsThatSQLiteRunsWorkersInsideServe() async throws {
        let folder = try Self.freshFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let worker = try Self.start(["worker"], in: folder)
        #expect(await worker.waitForExit(timeout: hangGuard) != 0)
        #expect(worker.log.contains("SQLite serves one process"))
    }

    @Test func aBadEntityTypesFileFailsAtStartNamingFileTypeAndKey() async throws {
        let folder = try Self.freshFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try "types:\n  notes:\n    policy: newest_wins\n".write(toFile: folder + "/types.yaml", atomically: true, encoding: .utf8)
        let server = try Self.start(["serve", "--port", "\(SyncGateProcess.freePort())", "--collections", "types.yaml"], in: folder)
        #expect(await server.waitForExit(timeout: hangGuard) != 0)
        #expect(server.log.contains("types.yaml: type 'notes': key 'policy': 'newest_wins' is not one of lww"), "\(server.log)")
    }

    /// A SQLite server killed in the middle of a job's transaction — held there by the
    /// `SYNCGATE_TEST_HOLD_APPLY` seam, so the kill is known to land mid-job, never on an idle
    /// queue — three times over: after each restart every acknowledged push is applied exactly
    /// once and nothing half-applied is ever visible. SQLite runs with its durable default.
    @Test func aServeKilledMidJobRecoversWithoutLossOrDuplicates() async throws {
        let folder = try Self.freshFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let port = SyncGateProcess.freePort()
        let client = ProcessClient(base: "http://127.0.0.1:\(port)")
        func start(workers: Int = 1, holdingIn hold: String? = nil) throws -> SyncGateProcess {
            var environment = Self.plainEnvironment
            if let hold { environment["SYNCGATE_TEST_HOLD_APPLY"] = hold }
            return try SyncGateProcess(["serve", "--port", "\(port)", "--workers", "\(workers)"], environment: environment, directory: folder, replaceEnvironment: true)
        }
        var server = try start(workers: 0)
        try await client.waitUntilReady(server)
        let token = try #require(Self.loggedDevToken(server.log))
        server.signal(SIGTERM)
        _ = await server.waitForExit(timeout: hangGuard)

        var expected: Set<String> = []
        var jobs: [String] = []
        for round in 0..<3 {
            // Queue the round's pushes with no worker running ...
            server = try start(workers: 0)
            try await client.waitUntilReady(server)
            for index in 0..<20 {
                let operations = (0..<5).map { Op.create("contacts", "r\(round)-j\(index)-c\($0)", ["n": .int(Int64($0))], key: "r\(round)-j\(index)-c\($0)") }
                let pushed = try await client.request(.POST, "/v1/sync/push?wait=0", token: token, device: "phone", body: ProcessClient.pushBody(operations))
                #expect(pushed.status == 202)
                guard let id = pushed.json?["job_id"]?.stringValue else { continue }
                jobs.append(id)
                expected.formUnion(operations.map(\.entityID))
            }
            server.signal(SIGTERM)
            #expect(await server.waitForExit(timeout: hangGuard) == 0)
            // ... then let one lane take a job and hold it inside its transaction (SQLite's one
            // writer with it): entities and changes written, idempotency records and result not yet.
            let hold = folder + "/hold-\(round)"
            try FileManager.default.createDirectory(atPath: hold, withIntermediateDirectories: true)
            server = try start(holdingIn: hold)
            try await eventually("a job to be held mid-transaction", every: .milliseconds(10)) {
                (try FileManager.default.contentsOfDirectory(atPath: hold)).contains { $0.hasPrefix("held-") }
            }
            server.signal(SIGKILL)
            #expect(await server.waitForExit(timeout: hangGuard) != nil)
        }
        server = try start()
        try await client.waitUntilReady(server)
        for id in jobs {
            let job = try await client.request(.GET, "/v1/jobs/\(id)?wait=30000", token: token, device: nil)
            #expect(job.json?["status"] == "done", "job \(id): \(String(describing: job.json))")
            #expect(job.json?["results"]?.arrayValue?.allSatisfy { $0["status"] == "applied" } == true, "job \(id)")
        }
        var changes: [JSONValue] = []
        var cursor = ""
        while true {
            let page = try await client.request(.GET, "/v1/sync/pull?limit=1000" + (cursor.isEmpty ? "" : "&cursor=\(cursor)"), token: token, device: "tablet")
            changes += page.json?["changes"]?.arrayValue ?? []
            cursor = page.json?["cursor"]?.stringValue ?? ""
            if page.json?["has_more"] != true { break }
        }
        #expect(changes.count == expected.count)
        #expect(Set(changes.compactMap { $0["entity_id"]?.stringValue }) == expected)
        #expect(changes.allSatisfy { $0["version"] == 1 })
        server.signal(SIGTERM)
        _ = await server.waitForExit(timeout: hangGuard)
    }
}
