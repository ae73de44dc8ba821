import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import SyncGatePostgres
import SyncGateStorage

/// A store plus the background work it needs (connection pool, listener, checkpoints).
typealias RunnableStore = SyncStore & Service

/// Turns configuration into running parts, shared by every command.
enum Runtime {
    static func makeStore(_ url: DatabaseURL, logger: Logger, maximumConnections: Int = 20) throws -> any RunnableStore {
        switch url {
        case .postgres(let location):
            return PostgresStore(configuration: .init(location: location, maximumConnections: maximumConnections), logger: logger)
        case .sqlite:
            throw ValidationError("sqlite: URLs are not supported by this build yet; use a postgres:// URL")
        }
    }

    /// Runs `body` against a running store, for commands that do one thing and exit.
    static func withStore<Result: Sendable>(
        _ url: DatabaseURL,
        logger: Logger,
        _ body: @Sendable (any SyncStore) async throws -> Result
    ) async throws -> Result {
        let store = try makeStore(url, logger: logger, maximumConnections: 4)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await store.run() }
            defer { group.cancelAll() }
            let result = try await body(store)
            await store.shutdown()
            return result
        }
    }

    /// The HS256 signing secret: `SYNCGATE_JWT_SECRET`.
    static func jwtSecret(for url: DatabaseURL, logger: Logger) throws -> String {
        if let secret = Environment.string("SYNCGATE_JWT_SECRET") {
            if secret.utf8.count < 32 {
                logger.warning("SYNCGATE_JWT_SECRET is shorter than 32 bytes; use a long random secret in production")
            }
            return secret
        }
        throw ValidationError("SYNCGATE_JWT_SECRET is not set: export a long random secret (e.g. `openssl rand -hex 32`)")
    }
}
