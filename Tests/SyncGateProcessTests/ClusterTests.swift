import Foundation
import NIOHTTP1
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateTestSupport
import Testing

/// `scripts/cluster`: two fronts behind haproxy, a worker and a durable PostgreSQL on this
/// machine. Pushes and pulls go through the balancer; both fronts answer some of them; the
/// worker's metrics show the jobs; the load tool runs against the balancer and loses nothing.
/// Never skipped: without haproxy (and no way to install it) `start` fails, and so does the test.
@Suite(.timeLimit(.minutes(10))) struct ClusterTests {
    static let scriptPath = DeployTests.root.appendingPathComponent("scripts/cluster").path

    @Test func aLocalClusterServesThroughItsBalancer() async throws {
        // Our folder, so the cluster is stopped whatever happens after `start` began.
        let directory = NSTemporaryDirectory() + "syncgate-cluster-\(UUID().uuidString.prefix(8))"
        do {
            try await exercise(directory)
        } catch {
            _ = try? await Self.script(["stop", directory], timeout: hangGuard)
            throw error
        }
        let stopped = try await Self.script(["stop", directory], timeout: hangGuard)
        #expect(stopped.status == "0", "\(stopped.log)")
        #expect(!FileManager.default.fileExists(atPath: directory))
    }

    /// Runs `scripts/cluster ARGUMENTS`: its exit status and output.
    static func script(_ arguments: [String], timeout: Duration) async throws -> (status: String, log: String) {
        try await SyncGateProcess.script(scriptPath, arguments, timeout: timeout)
    }

    func exercise(_ directory: String) async throws {
        let (status, log) = try await Self.script(["start", "--fronts", "2", "--workers", "1", "--dir", directory], timeout: .seconds(240))
        try #require(status == "0", "scripts/cluster start: \(log)")
        // `export NAME=value` lines (the log also holds stderr: haproxy's installation, say).
        var cluster: [String: String] = [:]
        for line in log.split(separator: "\n") where line.hasPrefix("export SYNCGATE_") {
            let pair = line.dropFirst("export ".count).split(separator: "=", maxSplits: 1)
            if pair.count == 2 { cluster[String(pair[0])] = String(pair[1]) }
        }
        let balancer = ProcessClient(base: try #require(cluster["SYNCGATE_URL"], "\(log)"))
        let fronts = try #require(cluster["SYNCGATE_CLUSTER_FRONTS"]).split(separator: ",").map { ProcessClient(base: String($0)) }
        let worker = ProcessClient(base: try #require(cluster["SYNCGATE_CLUSTER_WORKER_METRICS"]))
        let secret = try #require(cluster["SYNCGATE_JWT_SECRET"])
        #expect(fronts.count == 2)

        let token = try await TokenAuthority(secret: secret).issue(userID: "alice", ttlSeconds: 600)
        for index in 1...4 {
            let body = ProcessClient.pushBody([Op.create("weightLogs", "w\(index)", ["kg": .int(Int64(60 + index))], key: "k\(index)")])
            let pushed = try await balancer.request(.POST, "/v1/sync/push?wait=30000", token: token, device: "phone", body: body)
            #expect(pushed.status == 200 && pushed.json?["status"] == "done", "\(String(describing: pushed.json))")
        }
        let pulled = try await balancer.request(.GET, "/v1/sync/pull", token: token, device: "tablet")
        #expect(pulled.json?["changes"]?.arrayValue?.count == 4)

        // Round robin: each front answered some of the pushes; the one worker applied them all.
        for front in fronts {
            let text = try await front.text("/metrics")
            let pushes = ObservabilityProcessTests.value(of: #"syncgate_http_requests_total{route="/v1/sync/push",method="POST",status="200"}"#, in: text)
            #expect((pushes ?? 0) >= 1, "\(front.base) answered no push")
        }
        try await eventually("the worker's metrics to count the 4 jobs") {
            let text = try await worker.text("/metrics")
            return ObservabilityProcessTests.value(of: #"syncgate_job_attempts_total{outcome="done"}"#, in: text) == 4
        }

        // The load tool targets the balancer like any deployment.
        let load = try SyncGateProcess(
            executable: "/usr/bin/nice",
            ["-n", "15", try SyncGateProcess.binary(), "load", "sync", "--url", balancer.base, "--users", "4", "--batch", "5", "--duration", "3", "--verify"],
            environment: ["SYNCGATE_JWT_SECRET": secret]
        )
        #expect(await load.waitForExit(timeout: hangGuard) == 0, "\(load.log)")
        #expect(load.log.contains(" 0 lost, 0 applied twice"), "\(load.log)")
    }
}
