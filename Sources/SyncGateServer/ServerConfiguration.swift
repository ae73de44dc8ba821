import Foundation
public import SyncGateCore
public import SyncGateHTTP
public import SyncGateStorage
public import SyncGateWorker

/// Everything a `serve` or `worker` process is configured with; defaults are the zero-setup
/// embedded server. Read it from flags, environment and file with ``init(reader:)``.
public struct ServerConfiguration: Sendable {
    /// Where the data lives.
    public var database: DatabaseURL = .defaultSQLite
    /// The HS256 signing secret for bearer tokens; `nil` uses the development secret kept beside a
    /// SQLite database (refused for PostgreSQL).
    public var jwtSecret: String?
    /// Tokens whose `exp` lies further ahead are refused.
    public var jwtMaximumLifetimeSeconds = TokenAuthority.defaultMaximumLifetimeSeconds
    public var host = "127.0.0.1"
    public var port = 8080
    /// In-process worker lanes of `serve` (0: a front only).
    public var workers = 2
    /// Lanes of a `syncgate worker` process.
    public var workerConcurrency = 4
    public var front = FrontConfiguration()
    /// Leases, heartbeats, polling and retries of the workers; `concurrency` is set from ``workers``
    /// or ``workerConcurrency``.
    public var worker = WorkerConfiguration(workerID: ServerConfiguration.defaultWorkerID())
    public var retention = RetentionConfiguration()
    public var maintenanceInterval: Duration = .seconds(60)
    public var collections: Collections = .default
    /// `trace` … `critical`.
    public var logLevel = "info"
    /// Test seams run in the workers of this process.
    public var workerHooks = WorkerHooks()
    /// Test seams run inside the store's transactions (a store opened from ``database``).
    public var storeHooks = StoreHooks()

    public init() {}

    /// `host-pid-random`: unique per process, readable in `syncgate admin jobs`.
    public static func defaultWorkerID() -> String {
        "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)-\(UInt16.random(in: .min ... .max))"
    }

    /// The worker configuration with `lanes` lanes.
    public func worker(lanes: Int) -> WorkerConfiguration {
        var worker = self.worker
        worker.concurrency = lanes
        return worker
    }
}
