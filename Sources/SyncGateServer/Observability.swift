import CoreMetrics
import Hummingbird
package import Logging
import Metrics
import Prometheus
package import ServiceLifecycle
import SyncGateHTTP
import SyncGateCore
import SyncGateWire
package import SyncGateStorage

/// Samples the queue into ``MetricName/jobs``, ``MetricName/queueDepth`` and
/// ``MetricName/queueOldestAge`` every `interval`, with one query that reads only the partial
/// indexes of unfinished jobs (finished ones are counted by ``MetricName/jobAttempts``).
package struct QueueSampler: Service {
    let store: SyncStore
    let interval: Duration
    let logger: Logger

    package init(store: SyncStore, interval: Duration = .seconds(10), logger: Logger) {
        self.store = store
        self.interval = interval
        self.logger = logger
    }

    package func run() async throws {
        let states: [JobState] = [.queued, .running, .retrying]
        let byState = Dictionary(uniqueKeysWithValues: states.map { ($0, Gauge(label: MetricName.jobs, dimensions: [("state", $0.rawValue)])) })
        let depth = Gauge(label: MetricName.queueDepth)
        let oldest = Gauge(label: MetricName.queueOldestAge)
        // Ends quietly on graceful shutdown: a service that throws would fail the whole process.
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    let stats = try await store.queueStats()
                    for state in states { byState[state]?.record(stats.jobsByState[state] ?? 0) }
                    depth.record(stats.queueDepth)
                    oldest.record(Double(stats.oldestQueuedAgeMilliseconds ?? 0) / 1000)
                } catch {
                    logger.debug("sampling the queue failed", metadata: ["syncgate.error": "\(error)"])
                }
                try? await Task.sleep(for: interval)
            }
        }
    }
}

/// An HTTP server with only `GET /metrics` (and `/healthz`): a worker's metrics port, or a
/// front's when the metrics should not share the public port.
package func buildMetricsServer(host: String, port: Int, logger: Logger) -> some Service {
    let router = Router()
    router.get("/metrics") { _, _ in Response.prometheus(PrometheusMetricsFactory.defaultRegistry) }
    router.get("/healthz") { _, _ in Response.json(["status": "ok"]) }
    return Application(router: router, configuration: .init(address: .hostname(host, port: port), serverName: "syncgate-metrics"), logger: logger)
}
