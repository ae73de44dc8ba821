public import Logging
import NIOCore
import PostgresNIO
public import ServiceLifecycle
import _ConnectionPoolModule
import Synchronization
public import SyncGateCore
public import SyncGateStorage

/// The PostgreSQL driver: production and horizontally scaled deployments.
///
/// Run it as a `Service` (it owns the connection pool and the LISTEN connection); every front and
/// worker process has one.
public final class PostgresStore: SyncStore, Service {
    public struct Configuration: Sendable {
        public var location: DatabaseURL.PostgresLocation
        public var maximumConnections: Int
        /// How long the front waits for the database before answering `503 UNAVAILABLE`.
        public var requestTimeout: Duration
        /// How long a worker waits for one claim, heartbeat, apply or failure record. It bounds
        /// how long a lane stays stuck on a request lost when the database restarts (the heartbeat
        /// keeps that job's lease alive meanwhile), so it is short: a 1,000-operation apply takes
        /// well under a second, and a job cut off by it is only retried.
        public var jobTimeout: Duration
        /// How long a migration, retention or administration step may take.
        public var maintenanceTimeout: Duration

        public init(
            location: DatabaseURL.PostgresLocation,
            maximumConnections: Int = 20,
            requestTimeout: Duration = .seconds(5),
            jobTimeout: Duration = .seconds(15),
            maintenanceTimeout: Duration = .seconds(1800)
        ) {
            self.location = location
            self.maximumConnections = maximumConnections
            self.requestTimeout = requestTimeout
            self.jobTimeout = jobTimeout
            self.maintenanceTimeout = maintenanceTimeout
        }
    }

    public let driverName = "postgres"
    public let notifier: ChangeNotifier
    let configuration: Configuration
    let client: PostgresClient
    let logger: Logger
    /// The global queue depth and when it was read (see `globalQueueDepth()`).
    let depthCache = Mutex<(depth: Int, at: ContinuousClock.Instant)?>(nil)

    /// The NOTIFY channel every event travels on.
    static let channel = "syncgate_events"

    public init(configuration: Configuration, notifier: ChangeNotifier = ChangeNotifier(), logger: Logger) {
        self.configuration = configuration
        self.notifier = notifier
        self.logger = logger
        var clientConfiguration = Self.clientConfiguration(configuration.location)
        clientConfiguration.options.maximumConnections = configuration.maximumConnections
        clientConfiguration.options.connectTimeout = .seconds(5)
        // The pool logs every failed connection attempt at info and warns when a query races its
        // start-up; SyncGate reports outages itself, so keep the pool quiet unless debugging.
        var background = logger
        if logger.logLevel > .debug { background.logLevel = .error }
        self.client = PostgresClient(configuration: clientConfiguration, backgroundLogger: background)
    }

    static func clientConfiguration(_ location: DatabaseURL.PostgresLocation) -> PostgresClient.Configuration {
        if let directory = location.socketDirectory {
            return PostgresClient.Configuration(
                unixSocketPath: "\(directory)/.s.PGSQL.\(location.port)",
                username: location.user,
                password: location.password,
                database: location.database
            )
        }
        let tls: PostgresClient.Configuration.TLS
        switch location.tlsMode {
        case "require": tls = .require(.makeClientConfiguration())
        case "prefer": tls = .prefer(.makeClientConfiguration())
        default: tls = .disable
        }
        return PostgresClient.Configuration(
            host: location.host,
            port: location.port,
            username: location.user,
            password: location.password,
            database: location.database,
            tls: tls
        )
    }

    /// Runs the connection pool and the notification listener until cancelled or shut down.
    ///
    /// Put the store first in a `ServiceGroup`: services shut down in reverse order, so the
    /// connections close only after the HTTP server and the workers have drained.
    public func run() async throws {
        let listener = PostgresListener(configuration: Self.clientConfiguration(configuration.location), notifier: notifier, logger: logger)
        try await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask { await self.client.run() }
                group.addTask { await listener.run() }
            }
        }
        notifier.close()
    }

    public func shutdown() async {
        notifier.close()
    }

    // MARK: - Query helpers

    /// Runs `body` in a transaction on one connection; rolls back when it throws.
    func transaction<Result: Sendable>(
        _ begin: String = "BEGIN",
        _ body: (Transaction) async throws -> Result
    ) async throws -> Result {
        try await client.withConnection { connection in
            let transaction = Transaction(connection: connection, logger: logger)
            try await connection.query(PostgresQuery(unsafeSQL: begin), logger: logger)
            do {
                let result = try await body(transaction)
                try await connection.query("COMMIT", logger: logger)
                return result
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: logger)
                throw error
            }
        }
    }

    /// How long an operation may take before its caller stops waiting for it.
    enum DeadlineKind {
        /// The front's calls: past it, clients get `503 UNAVAILABLE` instead of a hanging request.
        case request
        /// A worker's claim, heartbeat, apply or failure record.
        case job
        /// Migrations, retention, compaction and administration.
        case maintenance
    }

    /// Runs a database operation with a deadline.
    ///
    /// The work runs in a task of its own and is abandoned (and cancelled) at the deadline, rather
    /// than awaited: PostgresNIO can lose a request that was in flight when the server went away,
    /// leaving it suspended for good even under cancellation. Without a deadline every caller of
    /// such a request — a worker lane, a pull — would hang with it. (The pool replaces the dead
    /// connection, so an abandoned request does not keep a connection.)
    func withDeadline<Result: Sendable>(
        _ operation: String,
        _ kind: DeadlineKind,
        _ body: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        let timeout: Duration
        switch kind {
        case .request: timeout = configuration.requestTimeout
        case .job: timeout = configuration.jobTimeout
        case .maintenance: timeout = configuration.maintenanceTimeout
        }
        let race = DeadlineRace<Result>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                race.start(continuation)
                let work = Task {
                    do {
                        race.finish(.success(try await body()))
                    } catch {
                        race.finish(.failure(Self.availabilityError(error, operation: operation)))
                    }
                }
                let timer = Task {
                    try await Task.sleep(for: timeout)
                    race.finish(.failure(StoreUnavailableError("\(operation) took longer than \(timeout)")))
                }
                race.onFinish {
                    timer.cancel()
                    work.cancel()
                }
            }
        } onCancel: {
            race.finish(.failure(CancellationError()))
        }
    }

    /// Connection-level failures become ``StoreUnavailableError``; anything else passes through.
    static func availabilityError(_ error: any Error, operation: String) -> any Error {
        switch error {
        case let error as PSQLError where isConnectionFailure(error):
            return StoreUnavailableError("\(operation): \(error.code)")
        case let error as PostgresTransactionError:
            if let underlying = (error.closureError ?? error.beginError ?? error.commitError) as? PSQLError, isConnectionFailure(underlying) {
                return StoreUnavailableError("\(operation): \(underlying.code)")
            }
            return error
        case is ConnectionPoolError:
            return StoreUnavailableError("\(operation): no database connection")
        default:
            return error
        }
    }

    static func isConnectionFailure(_ error: PSQLError) -> Bool {
        switch error.code {
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .poolClosed, .sslUnsupported:
            return true
        case .server:
            // 08xxx: connection exceptions; 57P0x: the server is shutting down or starting up.
            let state = error.serverInfo?[.sqlState] ?? ""
            return state.hasPrefix("08") || state.hasPrefix("57P")
        default:
            return false
        }
    }
}

/// One open transaction: its statements, counted (a job's apply must not need more statements
/// for more operations).
final class Transaction {
    let connection: PostgresConnection
    let logger: Logger
    private(set) var statements = 0

    init(connection: PostgresConnection, logger: Logger) {
        self.connection = connection
        self.logger = logger
    }

    @discardableResult
    func query(_ query: PostgresQuery, file: String = #fileID, line: Int = #line) async throws -> PostgresRowSequence {
        statements += 1
        return try await connection.query(query, logger: logger, file: file, line: line)
    }
}

extension PostgresRowSequence {
    /// All rows of a one-column result, decoded.
    func collect<Column: PostgresDecodable>(_ column: Column.Type) async throws -> [Column] {
        var values: [Column] = []
        for try await row in self {
            values.append(try row.decode(Column.self))
        }
        return values
    }

    /// All rows, decoded.
    func collect<each Column: PostgresDecodable>(_ columns: (repeat each Column).Type) async throws -> [(repeat each Column)] {
        var rows: [(repeat each Column)] = []
        for try await row in self {
            rows.append(try row.decode(columns))
        }
        return rows
    }
}

extension JSONParser {
    /// Documents read back from the database were validated on the way in; allow deep nesting.
    static let stored = JSONParser(maximumDepth: 512)
}

/// The first of a piece of work and its deadline to finish resumes the waiting caller.
final class DeadlineRace<Result: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Result, any Error>?
        var outcome: Swift.Result<Result, any Error>?
        var onFinish: (@Sendable () -> Void)?
    }

    private let state = Mutex(State())

    func start(_ continuation: CheckedContinuation<Result, any Error>) {
        let early = state.withLock { state -> Swift.Result<Result, any Error>? in
            if let outcome = state.outcome { return outcome }
            state.continuation = continuation
            return nil
        }
        if let early { continuation.resume(with: early) }
    }

    func onFinish(_ action: @escaping @Sendable () -> Void) {
        let done = state.withLock { state -> Bool in
            if state.outcome != nil { return true }
            state.onFinish = action
            return false
        }
        if done { action() }
    }

    func finish(_ outcome: Swift.Result<Result, any Error>) {
        let (continuation, action) = state.withLock { state -> (CheckedContinuation<Result, any Error>?, (@Sendable () -> Void)?) in
            guard state.outcome == nil else { return (nil, nil) }
            state.outcome = outcome
            defer { state.continuation = nil; state.onFinish = nil }
            return (state.continuation, state.onFinish)
        }
        continuation?.resume(with: outcome)
        action?()
    }
}
