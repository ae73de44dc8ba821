import Logging
import NIOCore
import PostgresNIO
import Synchronization
import SyncGateStorage
import SyncGateConcurrency

/// One LISTEN connection per process, fanned out in memory through the ``ChangeNotifier``.
///
/// It connects like the pool (same host, credentials and `sslmode`), reconnects with backoff
/// when the connection drops and then publishes `resynchronize`, because notifications sent
/// while it was away are lost: the feed watcher re-reads every watched head at once.
struct PostgresListener: Sendable {
    let configuration: PostgresClient.Configuration
    let location: DatabaseURL.PostgresLocation
    let notifier: ChangeNotifier
    let logger: Logger
    /// The first wait before reconnecting (it doubles up to 2 s while reconnecting fails).
    let reconnectDelay: Duration
    /// Told why when connecting shows the database away (refused, reset, shutting down), `nil`
    /// once listening again.
    var reachability: @Sendable (_ down: String?) -> Void = { _ in }

    /// How the connection shows in `pg_stat_activity.application_name`.
    static let applicationName = "syncgate listener"

    func run() async {
        var delay = reconnectDelay
        var connectionID = 0
        var failures = 0
        while !Task.isCancelled {
            connectionID += 1
            do {
                let connection: PostgresConnection
                do {
                    connection = try await PostgresConnection.connect(
                        configuration: try Self.connectionConfiguration(configuration, location: location),
                        id: connectionID,
                        logger: logger
                    )
                } catch {
                    // Only a failure to connect at the connection level says the database is away
                    // (refused, reset, shutting down): a listening connection that ends may be that
                    // connection's problem alone, a server that answers with another error
                    // (authentication, too many clients) is up, a connection that took too long
                    // to open may be a busy server's, and a TLS or configuration error is not an
                    // outage.
                    if let failure = error as? PSQLError, PostgresDriver.showsTheDatabaseAway(failure) {
                        reachability(failure.underlying.map { "\(failure.code): \($0)" } ?? "\(PostgresFailure(operation: "connect", failure))")
                    } else if let failure = error as? PSQLError, failure.serverInfo != nil {
                        // The server answered (too many clients, a bad password): it is there.
                        reachability(nil)
                    }
                    throw error
                }
                if failures > 0 {
                    logger.warning("notification listener reconnected; the live waiters re-read every watched head", metadata: [
                        "syncgate.attempts": "\(failures)",
                    ])
                    failures = 0
                }
                do {
                    // Cancelled (shutdown), the connection closes at once: PostgresNIO's UNLISTEN on
                    // the way out once left the session open after it, idle for minutes, under load.
                    try await withTaskCancellationHandler {
                        try await listen(on: connection, delay: &delay)
                    } onCancel: {
                        let _: EventLoopFuture<Void> = connection.close()
                    }
                } catch {
                    // A connection must be closed (not just dropped) before it is released.
                    try? await connection.close()
                    throw error
                }
                try? await connection.close()
            } catch {
                if Task.isCancelled { return }
                if failures == 0 {
                    logger.warning("notification listener disconnected; reconnecting (until then the live waiters' safety net polls)", metadata: [
                        "syncgate.error": "\((error as? PSQLError).map { PostgresFailure(operation: "listen", $0) } ?? error)",
                    ])
                }
                failures += 1
            }
            notifier.publish(.resynchronize)
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, .seconds(2))
        }
    }

    /// Listens until the connection ends or stops answering; resets the reconnect delay once listening.
    private func listen(on connection: PostgresConnection, delay: inout Duration) async throws {
        try await connection.listen(on: PostgresDriver.channel) { notifications in
            logger.debug("listening for notifications", metadata: ["syncgate.channel": "\(PostgresDriver.channel)"])
            // Anything sent before LISTEN took effect may have been missed.
            notifier.publish(.resynchronize)
            reachability(nil)
            delay = reconnectDelay
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for try await notification in notifications {
                        if let event = NotificationPayload.event(from: notification.payload) {
                            notifier.publish(event)
                        }
                    }
                }
                group.addTask { try await Self.checkLiveness(of: connection) }
                // Whichever ends first (the connection closed, or it stopped answering), close
                // the connection so the other ends too, and reconnect.
                defer { let _: EventLoopFuture<Void> = connection.close() }
                _ = try await group.next()
            }
        }
    }

    /// A silent connection would stop notifications without an error: ping it, with a deadline.
    static func checkLiveness(of connection: PostgresConnection) async throws {
        while true {
            try await Task.sleep(for: .seconds(15))
            let answered = Locked(false)
            let ping = Task {
                _ = try? await connection.query("SELECT 1", logger: Logger(label: "syncgate.listener")).collect()
                answered.update { $0 = true }
            }
            try await Task.sleep(for: .seconds(5))
            guard answered.value else {
                ping.cancel()
                throw ListenerStalled()
            }
        }
    }

    struct ListenerStalled: Error {}

    static func connectionConfiguration(_ client: PostgresClient.Configuration, location: DatabaseURL.PostgresLocation) throws -> PostgresConnection.Configuration {
        var configuration: PostgresConnection.Configuration
        if let path = client.unixSocketPath {
            configuration = .init(unixSocketPath: path, username: client.username, password: client.password, database: client.database)
        } else {
            var tls = PostgresConnection.Configuration.TLS.disable
            if let settings = PostgresDriver.tlsConfiguration(location) {
                let context = try NIOSSLContext(configuration: settings)
                tls = location.tlsMode == "prefer" ? .prefer(context) : .require(context)
            }
            configuration = .init(
                host: client.host ?? "localhost",
                port: client.port ?? 5432,
                username: client.username,
                password: client.password,
                database: client.database,
                tls: tls
            )
        }
        configuration.options.connectTimeout = .seconds(5)
        configuration.options.additionalStartupParameters = [("application_name", applicationName)]
        return configuration
    }
}

