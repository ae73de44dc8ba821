import Foundation
import Hummingbird
import NIOCore
import NIOHTTP1
import Synchronization
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// The real binary's observability, as an operator sees it: `GET /metrics` on a front and on a
/// worker's metrics port, spans exported over OTLP/HTTP to a collector, JSON log lines that
/// carry the trace id of the request they describe.
@Suite(.timeLimit(.minutes(10))) struct ObservabilityProcessTests {
    static let secret = "process-test-secret-process-test-secret"

    /// A stand-in OpenTelemetry collector: keeps the bodies POSTed to `/v1/traces` (protobuf).
    final class Collector: Sendable {
        let bodies = Mutex<[[UInt8]]>([])

        /// Whether some export holds all of `needles` (protobuf keeps strings and ids as raw bytes).
        func received(_ needles: [[UInt8]]) -> Bool {
            bodies.withLock { $0.contains { body in needles.allSatisfy { body.contains($0) } } }
        }
    }

    /// The value of one series line (`name{labels} value`) in a Prometheus text exposition.
    static func value(of series: String, in exposition: String) -> Double? {
        exposition.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.dropFirst(series.count + 1)) }
    }

    /// A front given a metrics port serves `/metrics` there only, beside `/healthz` for probes:
    /// the public port, the one a balancer exposes, does not show it.
    @Test func aFrontsMetricsPortIsTheOnlyOneServingMetrics() async throws {
        let folder = try EmbeddedModeTests.freshFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let port = SyncGateProcess.freePort(), metricsPort = SyncGateProcess.freePort()
        var environment = EmbeddedModeTests.plainEnvironment
        environment["SYNCGATE_METRICS_PORT"] = "\(metricsPort)"
        let front = try SyncGateProcess(["serve", "--port", "\(port)"], environment: environment, directory: folder, replaceEnvironment: true)
        defer { Task { await front.stop() } }
        let client = ProcessClient(base: "http://127.0.0.1:\(port)"), metrics = ProcessClient(base: "http://127.0.0.1:\(metricsPort)")
        try await client.waitUntilReady(front)
        let hidden = try await client.request(.GET, "/metrics", device: nil)
        #expect(hidden.status == 404 && hidden.json?.errorCode == "NOT_FOUND")
        #expect(try await metrics.text("/metrics").contains("syncgate_http_requests_total"))
        let health = try await metrics.request(.GET, "/healthz", device: nil)
        #expect(health.status == 200 && health.json?["status"] == "ok", "\(health)")
    }

    @Test func aFrontAndAWorkerExportMetricsTracesAndJSONLogs() async throws {
        let collector = Collector()
        let router = Router()
        router.post("/v1/traces") { request, _ -> HTTPResponse.Status in
            let body = try await request.body.collect(upTo: 16 << 20)
            collector.bodies.withLock { $0.append(Array(body.readableBytesView)) }
            return .ok
        }
        try await withTestHTTPServer(router) { collectorPort in
            let location = try await TestDatabases.shared.freshPostgres()
            let environment = [
                "SYNCGATE_DATABASE_URL": location.urlString, "SYNCGATE_JWT_SECRET": Self.secret, "SYNCGATE_LOG_FORMAT": "json",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(collectorPort)", "OTEL_BSP_SCHEDULE_DELAY": "100",
            ]
            let port = SyncGateProcess.freePort(), metricsPort = SyncGateProcess.freePort()
            let front = try SyncGateProcess(["serve", "--port", "\(port)", "--workers", "0"], environment: environment)
            let worker = try SyncGateProcess(["worker", "--concurrency", "2", "--metrics-port", "\(metricsPort)"], environment: environment)
            defer { Task { for process in [front, worker] { await process.stop() } } }
            let client = ProcessClient(base: "http://127.0.0.1:\(port)")
            let workerMetrics = ProcessClient(base: "http://127.0.0.1:\(metricsPort)")
            try await client.waitUntilReady(front)

            let token = try await TokenAuthority(secret: Self.secret).issue(userID: "alice", ttlSeconds: 600)
            let traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
            for round in 1...2 {
                let body = ProcessClient.pushBody([Op.create("weightLogs", "w\(round)", ["kg": 70], key: "k\(round)")])
                let pushed = try await client.request(
                    .POST, "/v1/sync/push?wait=30000", token: token, body: body, headers: [("traceparent", "00-\(traceID)-00f067aa0ba902b\(round)-01")]
                )
                #expect(pushed.status == 200 && pushed.json?["status"] == "done", "\(String(describing: pushed.json))")
                // The series move with the traffic: counted once per push, on the front and the worker.
                let frontText = try await client.text("/metrics")
                #expect(Self.value(of: #"syncgate_http_requests_total{route="/v1/sync/push",method="POST",status="200"}"#, in: frontText) == Double(round))
                #expect(Self.value(of: #"syncgate_http_request_duration_seconds_count{route="/v1/sync/push",method="POST"}"#, in: frontText) == Double(round))
                try await eventually("the worker's series") {
                    let text = try await workerMetrics.text("/metrics")
                    return Self.value(of: #"syncgate_job_attempts_total{outcome="done"}"#, in: text) == Double(round)
                        && Self.value(of: #"syncgate_operations_total{entity_type="weightLogs",result="applied"}"#, in: text) == Double(round)
                        && Self.value(of: "syncgate_push_to_apply_seconds_count", in: text) == Double(round)
                }
            }
            // Labels never take client-chosen values: an unknown entity type, method or path.
            let made = ProcessClient.pushBody([Op.create("madeUpType7", "x", ["a": 1], key: "k-made")])
            #expect(try await client.request(.POST, "/v1/sync/push?wait=30000", token: token, body: made).json?["results"]?[0]?["status"] == "rejected")
            #expect(try await client.request(.RAW(value: "PROPFIND"), "/no/such/path/42", token: token).status == 404)
            try await eventually("the rejected operation is counted") {
                Self.value(of: #"syncgate_operations_total{entity_type="unknown",result="rejected"}"#, in: try await workerMetrics.text("/metrics")) == 1
            }
            let labelled = try await client.text("/metrics")
            #expect(Self.value(of: #"syncgate_http_requests_total{route="NotFound",method="other",status="404"}"#, in: labelled) == 1)
            #expect(!labelled.contains("PROPFIND") && !labelled.contains("/no/such"))
            let workerText = try await workerMetrics.text("/metrics")
            #expect(!workerText.contains("madeUpType7"))
            for name in [MetricName.poolInUse, MetricName.poolWaiting, MetricName.queueDepth, MetricName.queueOldestAge, MetricName.applyDuration + "_count"] {
                #expect(workerText.contains("\n\(name)") || workerText.hasPrefix(name), "the worker exports \(name)")
            }
            #expect(workerText.contains(#"syncgate_jobs{state="queued"}"#))

            // Both processes export the push's trace: the front its request and enqueue, the worker its apply.
            let trace = Array(stride(from: 0, to: traceID.count, by: 2).map { UInt8(traceID.dropFirst($0).prefix(2), radix: 16)! })
            do {
                try await eventually("both processes export spans of the push's trace") {
                    collector.received([trace, Array("enqueue".utf8)]) && collector.received([trace, Array("apply".utf8), Array("notify".utf8)])
                }
            } catch {
                Issue.record("exports received: \(collector.bodies.withLock { $0.map(\.count) }); front: \(front.log.suffix(2000)); worker: \(worker.log.suffix(2000))")
                throw error
            }

            // Every log line is a JSON object; the push's request line carries its trace id.
            let lines = front.log.split(separator: "\n").filter { $0.hasPrefix("{") }
            #expect(!lines.isEmpty)
            let objects = lines.compactMap { try? JSONParser().parse(String($0)).objectValue }
            #expect(objects.count == lines.count)
            #expect(objects.contains { $0["message"] == "request" && $0["http.route"] == "/v1/sync/push" && $0["trace_id"] == .string(traceID) && $0["syncgate.user"] == "alice" })
            #expect(!front.log.contains(token))
        }
    }
}
