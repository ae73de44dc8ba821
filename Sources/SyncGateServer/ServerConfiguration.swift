import Foundation
package import SyncGateCore
package import SyncGateDialects
import SyncGateWire
package import Tracing
package import SyncGateHTTP
package import SyncGateStorage
package import SyncGateWorker
package import SyncGateWebhooks
package import SyncGatePush

/// Everything a `serve` or `worker` process is configured with; defaults are the zero-setup
/// embedded server. Read it from flags, environment and file with ``init(reader:)``.
package struct ServerConfiguration: Sendable {
    /// Where the data lives.
    package var database: DatabaseURL = .defaultSQLite
    /// Hot standbys of the PostgreSQL primary that serve the front's pulls (see
    /// ``ReplicatedFrontStore``); empty: the primary serves everything.
    package var readDatabases: [DatabaseURL.PostgresLocation] = []
    /// The HS256 signing secret for bearer tokens; `nil` uses the development secret kept beside a
    /// SQLite database (refused for PostgreSQL).
    package var jwtSecret: String?
    /// Tokens whose `exp` lies further ahead are refused.
    package var jwtMaximumLifetimeSeconds = TokenAuthority.defaultMaximumLifetimeSeconds
    package var host = "127.0.0.1"
    package var port = 8080
    /// In-process worker lanes of `serve` (0: a front only).
    package var workers = 2
    /// Lanes of a `syncgate worker` process.
    package var workerConcurrency = 4
    /// A front's pooled PostgreSQL connections (two more per in-process worker lane): a worker's
    /// commit answers a batch of pushes at once and their devices push again together, so a
    /// front's enqueues come in bursts as wide as the batch — at saturation with 20 users, a
    /// front that kept 4 open opened 6 more on demand.
    package static let frontConnections = 10

    /// The most pooled connections a `syncgate worker` opens, for bursts.
    package static func workerConnections(lanes: Int) -> Int { 2 * lanes + 4 }

    package var front = FrontConfiguration()
    /// The seed apps' own sync dialects the front serves beside `/v1` (docs/dialects.md); none
    /// in a new deployment.
    package var dialects: Set<Dialect> = []
    /// Leases, heartbeats, polling and retries of the workers; `concurrency` is set from ``workers``
    /// or ``workerConcurrency``.
    package var worker = WorkerConfiguration(workerID: ServerConfiguration.defaultWorkerID())
    package var retention = RetentionConfiguration()
    package var maintenanceInterval: Duration = .seconds(60)
    /// Change webhooks, announced and sent by worker processes (docs/webhooks.md).
    package var webhooks = WebhookConfiguration()
    /// Push nudges to backgrounded devices, sent by worker processes (docs/push.md); off without
    /// APNs or FCM credentials.
    package var push = PushConfiguration()
    package var collections: Collections = .default
    /// `trace` … `critical`.
    package var logLevel = "info"
    /// `text` (one line per event, for people) or `json` (one object per line, for log pipelines).
    package var logFormat = LogFormat.text
    /// The app's identity provider, whose RS256/ES256/EdDSA tokens are accepted beside HS256 ones.
    package var identityProvider: IdentityProviderKeys.Configuration?
    /// A port of its own for `GET /metrics` (a worker's only HTTP port; a front also serves it on its own port).
    package var metricsPort: Int?
    package var metricsHost = "127.0.0.1"
    /// The admin listener (docs/admin.md): the operator's API, on a front only; none when `nil`.
    package var adminPort: Int?
    package var adminHost = "127.0.0.1"
    /// The settings given (flags, environment, file) as their variables' names and values,
    /// secrets redacted: the admin API's running settings. The rest are defaults.
    package var configured: [(name: String, value: String)] = []
    /// Spans of requests, enqueues, claims and applies; `nil`: the process's tracer (OTLP when
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is set, otherwise a no-op). Tests set an in-memory one.
    package var tracer: (any Tracer)?
    /// Test seams run in the workers of this process.
    package var workerHooks = WorkerHooks()
    /// Test seams run inside the store's transactions (a store opened from ``database``).
    package var storeHooks = StoreHooks()

    package init() {}

    package enum LogFormat: String, Sendable, CaseIterable {
        case text, json
    }

    /// `host-pid-random`: unique per process, readable in `syncgate admin jobs`.
    package static func defaultWorkerID() -> String {
        "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)-\(UInt16.random(in: .min ... .max))"
    }

    /// The worker configuration with `lanes` lanes.
    package func worker(lanes: Int) -> WorkerConfiguration {
        var worker = self.worker
        worker.concurrency = lanes
        return worker
    }
}
