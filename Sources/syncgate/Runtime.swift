import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import SyncGatePostgres
import SyncGateSQLite
import SyncGateStorage

/// A store plus the background work it needs (connection pool, listener, checkpoints).
typealias RunnableStore = SyncStore & Service

/// Turns configuration into running parts, shared by every command.
enum Runtime {
    static func makeStore(_ url: DatabaseURL, logger: Logger, maximumConnections: Int = 20) throws -> any RunnableStore {
        switch url {
        case .postgres(let location):
            return PostgresStore(configuration: .init(location: location, maximumConnections: maximumConnections), logger: logger)
        case .sqlite(let path):
            try ensureFolder(of: path)
            do {
                return try SQLiteStore(path: path, logger: logger)
            } catch {
                throw ValidationError("cannot open SQLite database \(path): \(error)")
            }
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

    /// The HS256 signing secret and where it came from.
    struct Secret {
        var value: String
        /// Set when it is the generated development secret: the file that keeps it.
        var developmentFile: String?
    }

    /// `SYNCGATE_JWT_SECRET`; without it, in embedded (SQLite) mode, a development secret generated
    /// once and kept beside the database, so `serve` and `token` agree across restarts.
    static func jwtSecret(for url: DatabaseURL, logger: Logger) throws -> Secret {
        if let secret = Environment.string("SYNCGATE_JWT_SECRET") {
            if secret.utf8.count < 32 {
                logger.warning("SYNCGATE_JWT_SECRET is shorter than 32 bytes; use a long random secret in production")
            }
            return Secret(value: secret)
        }
        guard case .sqlite(let path) = url else {
            throw ValidationError("SYNCGATE_JWT_SECRET is not set: export a long random secret (e.g. `openssl rand -hex 32`)")
        }
        let file = (URL(fileURLWithPath: path).deletingLastPathComponent().path as NSString).appendingPathComponent("jwt-secret")
        if let stored = try? String(contentsOfFile: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines), !stored.isEmpty {
            return Secret(value: stored, developmentFile: file)
        }
        try ensureFolder(of: file)
        var generator = SystemRandomNumberGenerator()
        let secret = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: .min ... .max, using: &generator)) }.joined()
        guard FileManager.default.createFile(atPath: file, contents: Data((secret + "\n").utf8), attributes: [.posixPermissions: 0o600]) else {
            throw ValidationError("cannot write the development secret to \(file)")
        }
        return Secret(value: secret, developmentFile: file)
    }

    static func ensureFolder(of path: String) throws {
        let folder = URL(fileURLWithPath: path).deletingLastPathComponent().path
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        } catch {
            throw ValidationError("cannot create the data folder \(folder): \(error.localizedDescription)")
        }
    }
}
