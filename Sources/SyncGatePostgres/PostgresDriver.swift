import Foundation
package import Logging
import NIOCore
import NIOPosix
import CoreMetrics
import Metrics
package import PostgresNIO
import ServiceLifecycle
import Synchronization
import SyncGateCore
package import SyncGateWire
package import SyncGateStorage
import SyncGateConcurrency
import SyncGateRuntime

/// The PostgreSQL driver: production and horizontally scaled deployments.
///
/// Run it as a `Service` (it owns the connection pool and the LISTEN connection); every front and
/// worker process has one.
package final class PostgresDriver: StorageDriver, Service {
    package struct Configuration: Sendable {
        package var location: DatabaseURL.PostgresLocation
        package var maximumConnections: Int
        /// How long the front waits for the database before answering `503 UNAVAILABLE`.
        package var requestTimeout: Duration
        /// How long a worker waits for one claim, heartbeat or transaction. It bounds how long a
        /// lane stays stuck on a request lost when the database restarts (the heartbeat keeps that
        /// job's lease alive meanwhile), so it is short: a 1,000-operation apply takes well under a
        /// second, and a job cut off by it is only retried.
        package var jobTimeout: Duration
        /// How long a migration, retention or administration statement may take.
        package var maintenanceTimeout: Duration
        /// How long the global queue depth (the `OVERLOADED` check) may be reused before it is read again.
        package var queueDepthCacheDuration: Duration
        /// The first wait before the LISTEN connection reconnects (doubling up to 2 s).
        package var listenerReconnectDelay: Duration
        /// How long a cancelled driver waits for its pools, listener and announcer to end.
        package var stopGrace: Duration = .seconds(10)
        /// Whether the driver keeps a LISTEN connection. A hot standby's driver does not: a server
        /// in recovery refuses `LISTEN`, and the front learns of changes from the primary anyway.
        package var listens: Bool
        /// Whether the request-and-job pool opens a connection at start and keeps it open
        /// (`serve`, `worker`); the others open on demand and close after a minute idle. Off
        /// (commands that do one thing, tests): none is kept. See `hotPool`.
        package var keepsAConnection: Bool
        /// How long a pooled session may sit idle inside a transaction before PostgreSQL ends it
        /// (`idle_in_transaction_session_timeout`); `nil`: the pool's own deadline (below).
        package var idleInTransactionTimeout: Duration?

        /// A request's database deadline unless configured otherwise (probes must wait longer).
        package static let defaultRequestTimeout: Duration = .seconds(5)

        package init(
            location: DatabaseURL.PostgresLocation,
            maximumConnections: Int = 20,
            requestTimeout: Duration = Configuration.defaultRequestTimeout,
            jobTimeout: Duration = .seconds(15),
            maintenanceTimeout: Duration = .seconds(1800),
            queueDepthCacheDuration: Duration = .seconds(1),
            listenerReconnectDelay: Duration = .milliseconds(100),
            listens: Bool = true,
            keepsAConnection: Bool = false
        ) {
            self.location = location
            self.maximumConnections = maximumConnections
            self.requestTimeout = requestTimeout
            self.jobTimeout = jobTimeout
            self.maintenanceTimeout = maintenanceTimeout
            self.queueDepthCacheDuration = queueDepthCacheDuration
            self.listenerReconnectDelay = listenerReconnectDelay
            self.listens = listens
            self.keepsAConnection = keepsAConnection
        }
    }

    package let name = "postgres"
    package let notifier: ChangeNotifier
    let configuration: Configuration
    /// Requests and jobs: their statements are prepared once per connection and planned once
    /// (``hotPathSettings``).
    let client: PostgresClient
    /// Migrations, retention, compaction and administration: planned for each call's values, on
    /// a few connections of their own.
    let maintenanceClient: PostgresClient
    let logger: Logger
    /// The global queue depth and when it was read (see `globalQueueDepth()`).
    let depthCache = Mutex<(depth: Int, at: ContinuousClock.Instant)?>(nil)
    /// Set while the listener cannot connect (refused, closed, shutting down): requests then
    /// answer `503` at once instead of queueing for a pooled connection until their deadline.
    /// The listener clears it as soon as it connects again.
    let databaseDown = Atomic(false)
    /// Whether the database is a Citus coordinator (``isCitus()``); `nil` until looked up.
    let citus = Mutex<Bool?>(nil)
    /// On Citus, the connections already switched to custom plans (``citusSession(_:)``).
    let citusSessions = Mutex<Set<PostgresConnection.ID>>([])
    /// Why the listener last found the database away, for the `503`s it causes.
    let downCause = Mutex("")
    /// Pool occupancy for ``MetricName/poolInUse`` and ``MetricName/poolWaiting``.
    let poolMetrics = PoolMetrics()
    /// Requests to announce queued jobs (`insertJob`), one waiting at most: requests made while an
    /// announcement is on its way coalesce into the next (`announceJobs`).
    let announcements: AsyncStream<Void>.Continuation
    private let announcementRequests: AsyncStream<Void>

    /// How the maintenance pool's sessions (migrations, retention, compaction, administration)
    /// show in `pg_stat_activity.application_name`.
    static let maintenanceApplicationName = "syncgate maintenance"

    /// The NOTIFY channel every event travels on.
    static let channel = "syncgate_events"

    package init(configuration: Configuration, notifier: ChangeNotifier = ChangeNotifier(), logger: Logger) {
        self.configuration = configuration
        self.notifier = notifier
        self.logger = logger
        (announcementRequests, announcements) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        var clientConfiguration = Self.clientConfiguration(configuration.location)
        clientConfiguration.options.maximumConnections = configuration.maximumConnections
        clientConfiguration.options.connectTimeout = .seconds(5)
        var maintenanceConfiguration = clientConfiguration
        Self.hotPool(&clientConfiguration, keepsAConnection: configuration.keepsAConnection)
        // The maintenance lock holds one connection for a pass that uses another.
        maintenanceConfiguration.options.maximumConnections = min(4, configuration.maximumConnections + 2)
        maintenanceConfiguration.options.additionalStartupParameters = [("application_name", Self.maintenanceApplicationName)]
        // The pool logs every failed connection attempt at info and warns when a query races its
        // start-up; SyncGate reports outages itself, so keep the pool quiet unless debugging.
        var background = logger
        if logger.logLevel > .debug { background.logLevel = .error }
        // A transaction outlives its caller's deadline only in a process that stopped (SIGSTOP, a
        // hung host) between two statements; its locks (feed heads, job rows) would block every
        // push to those feeds until it resumed.
        clientConfiguration.options.additionalStartupParameters.append(
            Self.idleInTransactionLimit(configuration.idleInTransactionTimeout ?? max(configuration.requestTimeout, configuration.jobTimeout))
        )
        maintenanceConfiguration.options.additionalStartupParameters.append(
            Self.idleInTransactionLimit(configuration.idleInTransactionTimeout ?? configuration.maintenanceTimeout)
        )
        self.client = PostgresClient(configuration: clientConfiguration, backgroundLogger: background)
        self.maintenanceClient = PostgresClient(configuration: maintenanceConfiguration, backgroundLogger: background)
    }

    /// The settings of the connections that serve requests and jobs.
    ///
    /// Their statements are fixed texts over arrays of keys (PostgresStatements.swift) that read
    /// and write by index whatever the values, so one plan serves every call: a generic plan, made
    /// once per connection. PostgreSQL's default plans every call again (for an array parameter a
    /// custom plan always looks cheaper than the generic one), which was half of its CPU on the
    /// write path. A plan made once must stay right as tables grow, though: one made on a fresh
    /// database (a never-analyzed table counts as ten pages) chose hash joins over sequential
    /// scans of `entities`, which a minute later held 50,000 rows. These connections run only
    /// index-driven statements, so sequential scans and hash or merge joins are priced out (still
    /// taken where nothing else exists): every plan is index probes, right at any table size.
    /// Those priced-out plans (and the estimates of a table too small to be analyzed) pass
    /// `jit_above_cost` by far, and PostgreSQL would compile such a statement with JIT at every
    /// execution, which costs far more than these statements take to run: none gains from JIT.
    static let hotPathSettings: [(String, String)] = [
        ("jit", "off"),
        ("plan_cache_mode", "force_generic_plan"),
        ("enable_seqscan", "off"),
        ("enable_hashjoin", "off"),
        ("enable_mergejoin", "off"),
        ("enable_bitmapscan", "off"),
    ]

    /// Makes `client` the pool of requests and jobs: sessions with ``hotPathSettings`` and
    /// ``connectionHealthSettings``, named `syncgate` in `pg_stat_activity`, and no pool timers
    /// on the way of a statement.
    ///
    /// PostgresNIO's pool (1.33) arms a timer each time a connection goes back idle — a
    /// keep-alive query due in 30 s, and an idle timeout unless the connection is one of the
    /// pool's minimum — and cancels both at the next lease: a task group of two tasks and a
    /// `Task.sleep` each, several times per request at saturation. So the pool sends no keep-alive
    /// queries, and `serve` and `worker` keep a connection open (the pool's minimum, which has no
    /// idle timeout; the pool leases the first free connection, so light work stays on it; the
    /// others close after a minute idle). Keeping all of them would save more, but the pool
    /// does not survive it (below).
    /// What the keep-alive query was for: a connection whose socket closes (the server
    /// restarted, or ended the session) leaves the pool at once without one; one that dies
    /// silently fails its next statement at the caller's deadline, as the keep-alive query would
    /// have hung; and the server's TCP keep-alives (``connectionHealthSettings``) keep an idle
    /// session's path open through NAT and firewalls, the usual way idle sessions die silently.
    static func hotPool(_ client: inout PostgresClient.Configuration, keepsAConnection: Bool) {
        client.options.additionalStartupParameters = hotPathSettings + connectionHealthSettings + [("application_name", "syncgate")]
        client.options.keepAliveBehavior = nil
        // One kept, not as many as the process uses at once (a front's 10, a worker's lanes + 1):
        // PostgresNIO's pool (1.33) stops the process when a lease finds no idle
        // connection while the pool holds fewer than its minimum (a precondition in
        // `createNewDemandConnectionIfPossible`), and after the database restarts under load it
        // can hold fewer: connection attempts that fail during the outage are dropped, and the
        // pool refills to its minimum only if a request is waiting when one connects again.
        // With one kept it always holds at least one (`PoolRecoveryTests`).
        client.options.minimumConnections = keepsAConnection ? min(1, client.options.maximumConnections) : 0
    }

    /// TCP keep-alives from the server on an idle session (seconds; ignored on a Unix socket):
    /// the network path stays open, and a client gone silently is noticed in about two minutes.
    static let connectionHealthSettings: [(String, String)] = [
        ("tcp_keepalives_idle", "60"),
        ("tcp_keepalives_interval", "10"),
        ("tcp_keepalives_count", "6"),
    ]

    /// The session setting that ends a session idle in a transaction for longer than `limit`:
    /// milliseconds by NIO's saturating conversion (as `AnnounceJobsStatement`'s lock timeout),
    /// at least one (0 would mean no limit) and at most what the setting, an `int`, holds.
    static func idleInTransactionLimit(_ limit: Duration) -> (String, String) {
        let milliseconds = min(max(1, TimeAmount(limit).nanoseconds / 1_000_000), Int64(Int32.max))
        return ("idle_in_transaction_session_timeout", String(milliseconds))
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
        switch (location.tlsMode, tlsConfiguration(location)) {
        case (_, nil): tls = .disable
        case ("prefer", let configuration?): tls = .prefer(configuration)
        case (_, let configuration?): tls = .require(configuration)
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

    /// The TLS settings of `sslmode` (`nil`: no TLS), with libpq's meaning: `prefer` and
    /// `require` encrypt without checking the certificate, `verify-ca` checks it is signed by a
    /// trusted CA (`sslrootcert`, or the system's), `verify-full` also that it names the host.
    static func tlsConfiguration(_ location: DatabaseURL.PostgresLocation) -> TLSConfiguration? {
        var configuration = TLSConfiguration.makeClientConfiguration()
        switch location.tlsMode {
        case "prefer", "require": configuration.certificateVerification = .none
        case "verify-ca": configuration.certificateVerification = .noHostnameVerification
        case "verify-full": configuration.certificateVerification = .fullVerification
        default: return nil
        }
        if let file = location.tlsRootCertificate { configuration.trustRoots = .file(file) }
        return configuration
    }

    /// Runs the connection pool and the notification listener until cancelled or shut down.
    ///
    /// Put the store first in a `ServiceGroup`: services shut down in reverse order, so the
    /// connections close only after the HTTP server and the workers have drained.
    package func run() async throws {
        let listener = PostgresListener(
            configuration: Self.clientConfiguration(configuration.location), location: configuration.location, notifier: notifier, logger: logger,
            reconnectDelay: configuration.listenerReconnectDelay,
            reachability: { [self] cause in
                if let cause { downCause.withLock { $0 = cause } }
                databaseDown.store(cause != nil, ordering: .relaxed)
            }
        )
        try await cancelWhenGracefulShutdown {
            var parts: [(String, @Sendable () async -> Void)] = [
                ("pool", { @Sendable in await self.client.run() }),
                ("maintenance pool", { @Sendable in await self.maintenanceClient.run() }),
                ("announcer", { @Sendable in await self.announceJobs(self.announcementRequests) }),
            ]
            if self.configuration.listens { parts.append(("listener", { @Sendable in await listener.run() })) }
            let left = await Self.runParts(stopGrace: self.configuration.stopGrace, parts)
            if !left.isEmpty {
                self.logger.warning("database driver stopped without waiting any longer for parts that did not end", metadata: [
                    "syncgate.parts": "\(left.sorted())", "syncgate.grace": "\(self.configuration.stopGrace)",
                ])
            }
        }
        announcements.finish()
        notifier.close()
    }

    /// Runs each part in a task of its own until cancelled, then cancels them and waits at most
    /// `stopGrace` for them to end; returns the names of those that did not. A task group would
    /// wait for good, and a PostgresNIO part that does not end once cancelled (stress runs saw a
    /// store's driver still running two minutes after its cancellation) would hold its process.
    static func runParts(stopGrace: Duration, _ parts: [(String, @Sendable () async -> Void)]) async -> Set<String> {
        let (finished, finish) = AsyncStream<String?>.makeStream()
        let tasks = parts.map { name, body in
            Task {
                await body()
                finish.yield(name)
            }
        }
        // Unstructured: this wait outlives the caller's cancellation, by at most the grace.
        let waiting = Task { () -> Set<String> in
            var left = Set(parts.map(\.0))
            for await name in finished {
                guard let name else { return left }  // the grace ran out
                left.remove(name)
                if left.isEmpty { return [] }
            }
            return left
        }
        return await withTaskCancellationHandler {
            await waiting.value
        } onCancel: {
            for task in tasks { task.cancel() }
            Task {
                try? await Task.sleep(for: stopGrace)
                finish.yield(nil)
            }
        }
    }

    // MARK: - Running statements

    /// How long an operation may take before its caller stops waiting for it.
    package enum DeadlineKind {
        /// The front's calls: past it, clients get `503 UNAVAILABLE` instead of a hanging request.
        case request
        /// A worker's claim, heartbeat or transaction.
        case job
        /// Migrations, retention, compaction and administration.
        case maintenance
    }

    /// Runs `body` on a pooled connection with a deadline; connection failures become
    /// ``StoreUnavailableError``.
    /// - Parameter cancelsAbandonedWork: whether `body` is cancelled when its caller stops waiting
    ///   after it started (see ``withDeadline(_:_:giveUpWhileDown:cancelsAbandonedWork:_:)``).
    ///   Work still waiting for a connection is always cancelled: it has done nothing yet, and
    ///   must not do it after its caller was told it failed.
    func withConnection<Result: Sendable>(
        _ operation: String,
        _ kind: DeadlineKind,
        cancelsAbandonedWork: Bool = true,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        if kind == .request, databaseDown.load(ordering: .relaxed) {
            throw refusal(operation)
        }
        // A failure before the closure runs is the pool's: no connection could be had.
        let leased = Locked(false)
        // A request gives up (503) as soon as the database is known to refuse connections,
        // whether it still waits for a connection or holds one: a statement in flight when the
        // server went away may never be answered, and the client retries what it was told failed.
        let giveUpWhileDown: (@Sendable () -> Bool)? = kind == .request ? { @Sendable in true } : nil
        let client = kind == .maintenance ? maintenanceClient : client
        return try await withDeadline(
            operation, kind, giveUpWhileDown: giveUpWhileDown, cancelsAbandonedWork: { cancelsAbandonedWork || !leased.value }
        ) { [client, poolMetrics, self] in
            poolMetrics.waiting.increment()
            // Leasing moves the caller from waiting to in use; one that never got a connection stops waiting here.
            defer { if !leased.value { poolMetrics.waiting.decrement() } }
            do {
                return try await client.withConnection { connection in
                    leased.update { $0 = true }
                    poolMetrics.waiting.decrement()
                    poolMetrics.inUse.increment()
                    defer { poolMetrics.inUse.decrement() }
                    do {
                        try await self.citusSession(connection)
                        return try await body(connection)
                    } catch let error as PSQLError where Self.spoilsPreparedStatements(error) {
                        // PostgresNIO keeps a statement's failed preparation for the connection's
                        // life (a statement prepared before the migrations ran would fail on it
                        // for good): the pool replaces a closed connection.
                        try? await connection.close()
                        throw error
                    }
                }
            } catch where !leased.value && !(error is CancellationError) {
                throw StoreUnavailableError("\(operation): no database connection")
            }
        }
    }

    /// One query on a pooled connection, every row collected.
    package func query<each Column: PostgresDecodable>(
        _ operation: String, _ kind: DeadlineKind, _ query: PostgresQuery, as columns: (repeat each Column).Type
    ) async throws -> [(repeat each Column)] where repeat each Column: Sendable {
        let logger = self.logger
        return try await withConnection(operation, kind) { connection in
            try await connection.query(query, logger: logger).collect(columns)
        }
    }

    /// One prepared statement on a pooled connection, every row collected.
    @discardableResult
    func run<Statement: PostgresPreparedStatement>(_ operation: String, _ kind: DeadlineKind, _ statement: Statement) async throws -> [Statement.Row]
    where Statement.Row: Sendable {
        let logger = self.logger
        return try await withConnection(operation, kind) { connection in
            try await connection.rows(statement, logger: logger)
        }
    }

    /// One statement on a pooled connection, rows ignored.
    func execute(_ operation: String, _ kind: DeadlineKind, _ query: PostgresQuery) async throws {
        let logger = self.logger
        try await withConnection(operation, kind) { connection in
            _ = try await connection.query(query, logger: logger).collect()
        }
    }

    /// Runs `body` in a READ COMMITTED transaction on one connection; rolls back when it throws.
    /// A maintenance transaction takes the maintenance pool's connection and deadline.
    package func transaction<Result: Sendable>(
        now: Timestamp?, for purpose: TransactionPurpose,
        _ body: @escaping @Sendable (any StorageTransaction) async throws -> Result
    ) async throws -> Result {
        let logger = self.logger
        let citus = try await isCitus()
        return try await withConnection("transaction", purpose == .maintenance ? .maintenance : .job) { connection in
            try await connection.inTransaction(logger: logger) {
                // Citus refuses to write a reference table (households) after a multi-shard
                // statement ran in parallel in the same transaction.
                if citus { try await connection.query("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'", logger: logger) }
                return try await body(PostgresTransaction(connection: connection, now: now, citus: citus, logger: logger))
            }
        }
    }

    /// Runs a database operation with a deadline.
    ///
    /// The work runs in a task of its own and is abandoned (and cancelled) at the deadline, rather
    /// than awaited: PostgresNIO can lose a request that was in flight when the server went away,
    /// leaving it suspended for good even under cancellation. Without a deadline every caller of
    /// such a request — a worker lane, a pull — would hang with it. (The pool replaces the dead
    /// connection, so an abandoned request does not keep a connection.)
    ///
    /// - Parameters:
    ///   - giveUpWhileDown: while it returns true, the operation also ends (`503`) as soon as the
    ///     database is known to refuse connections.
    ///   - cancelsAbandonedWork: whether the abandoned work is cancelled, asked when the caller
    ///     stops waiting. A statement whose effect needs a follow-up once it has committed (the
    ///     enqueue's announcement) must read its answer to the end; a cancelled task may stop
    ///     reading it.
    func withDeadline<Result: Sendable>(
        _ operation: String,
        _ kind: DeadlineKind,
        giveUpWhileDown: (@Sendable () -> Bool)? = nil,
        cancelsAbandonedWork: @escaping @Sendable () -> Bool = { true },
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
                // Event-loop timers, not a task sleeping beside the work: this runs for every call.
                let timer = EventLoopTimer.after(timeout) {
                    race.finish(.failure(StoreUnavailableError("\(operation) took longer than \(timeout)")))
                }
                let downCheck = giveUpWhileDown.map { stillWaiting in
                    EventLoopTimer.shared.every(.milliseconds(50)) { [self] in
                        guard stillWaiting() else { return false }
                        guard databaseDown.load(ordering: .relaxed) else { return true }
                        race.finish(.failure(refusal(operation)))
                        return false
                    }
                }
                race.onFinish {
                    timer.cancel()
                    downCheck?.cancel()
                    if cancelsAbandonedWork() { work.cancel() }
                }
            }
        } onCancel: {
            race.finish(.failure(CancellationError()))
        }
    }

    /// Connection-level failures become ``StoreUnavailableError``; other PostgreSQL errors a
    /// ``PostgresFailure`` (no bind values); anything else passes through.
    static func availabilityError(_ error: any Error, operation: String) -> any Error {
        // Its debug description prints the column's raw bytes.
        if let error = error as? PostgresDecodingError {
            return PostgresFailure(operation: operation, code: "decoding", message: "column \(error.columnName) as \(error.targetType) from \(error.postgresType)")
        }
        guard let error = error as? PSQLError else { return error }
        guard isConnectionFailure(error) else { return PostgresFailure(operation: operation, error) }
        return StoreUnavailableError("\(operation): \(error.code)")
    }

    /// Errors after which the connection's prepared statements may stay broken: a missing
    /// relation, column or function (the schema was not migrated yet), a plan whose result type
    /// changed under it, a statement the server no longer has.
    static func spoilsPreparedStatements(_ error: PSQLError) -> Bool {
        guard error.code == .server, let state = error.serverInfo?[.sqlState] else { return false }
        return ["42P01", "42703", "42883", "0A000", "26000"].contains(state)
    }

    /// The answer to a request while the listener finds the database away.
    func refusal(_ operation: String) -> StoreUnavailableError {
        StoreUnavailableError("\(operation): the database refuses connections (\(downCause.withLock { $0 }))")
    }

    /// Whether a failure to connect shows the database away: a connection-level failure that is
    /// not a timeout. A connection that took too long to open says the server is slow or far,
    /// not that it is down; declaring it down would answer every request `503` at once, where
    /// the request deadline already bounds a slow one.
    static func showsTheDatabaseAway(_ error: PSQLError) -> Bool {
        guard isConnectionFailure(error) else { return false }
        if let underlying = error.underlying as? ChannelError, case .connectTimeout = underlying { return false }
        return true
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

extension Optional where Wrapped == Timestamp {
    /// The instant as a PostgreSQL parameter: milliseconds since the epoch, turned into a
    /// `timestamptz` with exact interval arithmetic (`timestamptz 'epoch' + ms * interval '1 ms'`;
    /// a `Date` would pass through a floating-point number); `NULL` for the database's clock.
    var milliseconds: Int64? { map(\.millisecondsSinceEpoch) }
}

extension Timestamp {
    init(_ date: Date) {
        self.init(millisecondsSinceEpoch: Int64((date.timeIntervalSince1970 * 1000).rounded()))
    }
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

/// Callers holding and waiting for pooled connections (PostgresNIO does not publish its pool's state).
struct PoolMetrics: Sendable {
    let inUse = Meter(label: MetricName.poolInUse)
    let waiting = Meter(label: MetricName.poolWaiting)
}

extension PostgresConnection {
    /// Runs `body` between BEGIN and COMMIT, and rolls back when it throws, rethrowing its error
    /// as it is. (PostgresNIO's `withTransaction` wraps every error in a
    /// `PostgresTransactionError`, which the driver's failure handling, reading `PSQLError`s,
    /// would no longer recognize.)
    func inTransaction<Result>(logger: Logger, _ body: () async throws -> Result) async throws -> Result {
        try await query("BEGIN", logger: logger)
        do {
            let result = try await body()
            try await query("COMMIT", logger: logger)
            return result
        } catch {
            _ = try? await query("ROLLBACK", logger: logger)
            throw error
        }
    }
}
