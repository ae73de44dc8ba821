import Foundation
package import Logging
package import ServiceLifecycle
import SyncGatePostgres
import SyncGateSQLite
package import SyncGateCore
import SyncGateWire
package import SyncGateStorage

/// A store and the service that keeps its driver running (connection pool and listener).
package struct OpenStore: Sendable {
    package let store: SyncStore
    package let service: any Service

    /// Opens the database at `url`.
    /// - Parameter keepsAConnection: PostgreSQL: whether a pooled connection is opened at start
    ///   and kept, for long-running processes (`serve`, `worker`). The others open on demand and
    ///   close after a minute idle (`PostgresDriver.hotPool`).
    package static func open(
        _ url: DatabaseURL, maximumConnections: Int = 20, keepsAConnection: Bool = false, clock: StoreClock = .database,
        hooks: StoreHooks = .init(), logger: Logger
    ) throws(ConfigurationError) -> OpenStore {
        switch url {
        case .postgres(let location):
            let driver = PostgresDriver(
                configuration: .init(location: location, maximumConnections: maximumConnections, keepsAConnection: keepsAConnection), logger: logger
            )
            return OpenStore(store: SyncStore(driver: driver, clock: clock, hooks: hooks, logger: logger), service: driver)
        case .sqlite(let path):
            try ensureFolder(of: path)
            do {
                let driver = try SQLiteDriver(path: path, logger: logger)
                return OpenStore(store: SyncStore(driver: driver, clock: clock, hooks: hooks, logger: logger), service: driver)
            } catch {
                throw ConfigurationError("cannot open SQLite database \(path): \(error)")
            }
        }
    }

    /// Opens a hot standby of a PostgreSQL primary, for reads only: no LISTEN connection (a
    /// server in recovery refuses it) and no migrations (the standby replays the primary's).
    package static func replica(_ location: DatabaseURL.PostgresLocation, maximumConnections: Int, keepsAConnection: Bool, logger: Logger) -> OpenStore {
        let driver = PostgresDriver(
            configuration: .init(location: location, maximumConnections: maximumConnections, listens: false, keepsAConnection: keepsAConnection), logger: logger
        )
        return OpenStore(store: SyncStore(driver: driver, logger: logger), service: driver)
    }

    /// Runs `body` against a running store, for commands that do one thing and exit.
    package static func with<Result: Sendable>(
        _ url: DatabaseURL,
        logger: Logger,
        _ body: @Sendable (SyncStore) async throws -> Result
    ) async throws -> Result {
        let opened = try open(url, maximumConnections: 4, logger: logger)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await opened.service.run() }
            defer { group.cancelAll() }
            return try await body(opened.store)
        }
    }

    static func ensureFolder(of path: String) throws(ConfigurationError) {
        let folder = URL(fileURLWithPath: path).deletingLastPathComponent().path
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        } catch {
            throw ConfigurationError("cannot create the data folder \(folder): \(error.localizedDescription)")
        }
    }
}
