import Logging
import PostgresNIO
import SyncGateStorage

/// One LISTEN connection per process, fanned out in memory through the ``ChangeNotifier``.
///
/// It reconnects with backoff when the connection drops and then publishes `resynchronize`,
/// because notifications sent while it was away are lost; waiters re-check the database.
struct PostgresListener: Sendable {
    let configuration: PostgresClient.Configuration
    let notifier: ChangeNotifier
    let logger: Logger

    func run() async {
        var delay: Duration = .milliseconds(100)
        var connectionID = 0
        while !Task.isCancelled {
            connectionID += 1
            do {
                let connection = try await PostgresConnection.connect(
                    configuration: Self.connectionConfiguration(configuration),
                    id: connectionID,
                    logger: logger
                )
                defer { Task { try? await connection.close() } }
                try await connection.listen(on: PostgresStore.channel) { notifications in
                    logger.debug("listening for notifications", metadata: ["syncgate.channel": "\(PostgresStore.channel)"])
                    // Anything sent before LISTEN took effect may have been missed.
                    notifier.publish(.resynchronize)
                    delay = .milliseconds(100)
                    for try await notification in notifications {
                        if let event = NotificationPayload.event(from: notification.payload) {
                            notifier.publish(event)
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                logger.debug("notification listener disconnected", metadata: ["syncgate.error": "\(error)"])
            }
            notifier.publish(.resynchronize)
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, .seconds(5))
        }
    }

    static func connectionConfiguration(_ client: PostgresClient.Configuration) -> PostgresConnection.Configuration {
        var configuration: PostgresConnection.Configuration
        if let path = client.unixSocketPath {
            configuration = .init(unixSocketPath: path, username: client.username, password: client.password, database: client.database)
        } else {
            configuration = .init(
                host: client.host ?? "localhost",
                port: client.port ?? 5432,
                username: client.username,
                password: client.password,
                database: client.database,
                tls: .disable
            )
        }
        configuration.options.connectTimeout = .seconds(5)
        return configuration
    }
}
