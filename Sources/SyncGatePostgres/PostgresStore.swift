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

        public init(location: DatabaseURL.PostgresLocation, maximumConnections: Int = 20, requestTimeout: Duration = .seconds(5)) {
            self.location = location
            self.maximumConnections = maximumConnections
            self.requestTimeout = requestTimeout
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

    /// Bounds a front-path call so an unreachable database answers `UNAVAILABLE` promptly
    /// instead of queueing behind the pool's reconnect attempts.
    func bounded<Result: Sendable>(_ operation: String, _ body: @escaping @Sendable () async throws -> Result) async throws -> Result {
        let timeout = configuration.requestTimeout
        return try await withThrowingTaskGroup(of: Result?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            do {
                guard let first = try await group.next(), let result = first else {
                    throw StoreUnavailableError("\(operation) took longer than \(timeout)")
                }
                return result
            } catch let error as PSQLError where Self.isConnectionFailure(error) {
                throw StoreUnavailableError("\(operation): \(error.code)")
            } catch let error as PostgresTransactionError {
                if let underlying = (error.closureError ?? error.beginError ?? error.commitError) as? PSQLError, Self.isConnectionFailure(underlying) {
                    throw StoreUnavailableError("\(operation): \(underlying.code)")
                }
                throw error
            } catch is ConnectionPoolError {
                throw StoreUnavailableError("\(operation): no database connection")
            }
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
