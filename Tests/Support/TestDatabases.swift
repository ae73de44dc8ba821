import Foundation
package import Logging
import PostgresNIO
import SyncGateCore
import SyncGateWire
import SyncGatePostgres
package import SyncGateStorage
import Testing

/// The storage drivers every conformance test runs against.
package enum Driver: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case postgres
    case sqlite

    package var testDescription: String { rawValue }

    package init(for url: DatabaseURL) {
        switch url {
        case .postgres: self = .postgres
        case .sqlite: self = .sqlite
        }
    }

    /// The drivers this run tests: `SYNCGATE_TEST_DRIVERS` (e.g. `sqlite` for a quick local loop),
    /// or all of them. Under `CI=true` a run without every driver fails (``Driver/checkCI()``).
    package static var selected: [Driver] {
        guard let list = ProcessInfo.processInfo.environment["SYNCGATE_TEST_DRIVERS"], !list.isEmpty else { return allCases }
        return allCases.filter { list.split(separator: ",").map(String.init).contains($0.rawValue) }
    }

    /// Whether this is a CI run, where nothing may be skipped.
    package static var isCI: Bool { ProcessInfo.processInfo.environment["CI"] == "true" }
}

/// Errors that make a test fail loudly instead of skipping.
package struct TestEnvironmentError: Error, CustomStringConvertible {
    package var description: String
    package init(description: String) { self.description = description }
}

/// Fresh, migrated databases for tests: one PostgreSQL database per test, cloned from a template
/// migrated once per test process.
package actor TestDatabases {
    package static let shared = TestDatabases()

    /// Creating the template happens once; concurrent callers await the same task (an actor
    /// alone would let them interleave at every `await`).
    private var template: Task<String, any Error>?
    private var counter = 0

    /// The server every PostgreSQL test uses, from `SYNCGATE_TEST_DATABASE_URL` (set by scripts/test).
    package nonisolated static func adminLocation() throws -> DatabaseURL.PostgresLocation {
        guard let text = ProcessInfo.processInfo.environment["SYNCGATE_TEST_DATABASE_URL"], !text.isEmpty else {
            throw TestEnvironmentError(
                description: "SYNCGATE_TEST_DATABASE_URL is not set: run the tests with scripts/test, which starts a throwaway PostgreSQL"
            )
        }
        guard case .postgres(let location) = try DatabaseURL(parsing: text) else {
            throw TestEnvironmentError(description: "SYNCGATE_TEST_DATABASE_URL must be a postgres:// URL")
        }
        return location
    }

    package static let logger: Logger = {
        var logger = Logger(label: "syncgate.tests")
        logger.logLevel = ProcessInfo.processInfo.environment["SYNCGATE_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .critical
        return logger
    }()

    /// A new empty database with the current schema.
    package func freshPostgres() async throws -> DatabaseURL.PostgresLocation {
        let admin = try Self.adminLocation()
        if let workers = Self.citusWorkers {
            counter += 1
            var location = admin
            location.database = "c\(ProcessInfo.processInfo.processIdentifier)_\(counter)"
            try await Self.makeCitusDatabase(location, workers: workers, migrated: true)
            return location
        }
        if template == nil {
            template = Task { try await Self.makeTemplate(admin) }
        }
        let templateName = try await template!.value
        counter += 1
        let name = "t\(ProcessInfo.processInfo.processIdentifier)_\(counter)"
        var location = admin
        location.database = name
        // The template's last connections may still be closing: retry briefly.
        var attempt = 0
        while true {
            attempt += 1
            do {
                try await Self.execute("CREATE DATABASE \(name) TEMPLATE \(templateName)", on: admin)
                return location
            } catch where attempt < 50 {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// A new database without any schema (for tests of migrating).
    package func freshEmptyPostgres() async throws -> DatabaseURL.PostgresLocation {
        let admin = try Self.adminLocation()
        counter += 1
        var location = admin
        location.database = "e\(ProcessInfo.processInfo.processIdentifier)_\(counter)"
        if let workers = Self.citusWorkers {
            try await Self.makeCitusDatabase(location, workers: workers, migrated: false)
            return location
        }
        try await Self.execute("CREATE DATABASE \(location.database)", on: admin)
        return location
    }

    /// The Citus workers (`host:port`, comma-separated in `SYNCGATE_TEST_CITUS_WORKERS`, set by
    /// `scripts/citus test`) when `SYNCGATE_TEST_DATABASE_URL` is a Citus coordinator: every
    /// PostgreSQL test then runs on a distributed schema.
    package nonisolated static var citusWorkers: [(host: String, port: Int)]? {
        guard let list = ProcessInfo.processInfo.environment["SYNCGATE_TEST_CITUS_WORKERS"], !list.isEmpty else { return nil }
        return list.split(separator: ",").compactMap { item in
            let parts = item.split(separator: ":")
            guard parts.count == 2, let port = Int(parts[1]) else { return nil }
            return (String(parts[0]), port)
        }
    }

    /// A database on the coordinator and every worker, with the extension and the nodes
    /// registered; when `migrated`, with the schema distributed by sql/citus/distribute.sql. (A
    /// template cannot be cloned: the shards live in the workers' databases.)
    static func makeCitusDatabase(_ location: DatabaseURL.PostgresLocation, workers: [(host: String, port: Int)], migrated: Bool) async throws {
        var admin = location
        admin.database = "postgres"
        try await execute(["SET citus.enable_create_database_propagation = on", "CREATE DATABASE \(location.database)"], on: admin)
        try await execute(["CREATE EXTENSION citus"], on: location)
        for worker in workers {
            var node = location
            node.host = worker.host
            node.port = worker.port
            try await execute(["CREATE EXTENSION IF NOT EXISTS citus"], on: node)
        }
        try await execute(
            ["SELECT citus_set_coordinator_host('\(location.host)', \(location.port))"] + workers.map { "SELECT citus_add_node('\($0.host)', \($0.port))" },
            on: location
        )
        guard migrated else { return }
        let driver = PostgresDriver(configuration: .init(location: location, maximumConnections: 1), logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await driver.run() }
            try await driver.migrate(logger: logger)
            group.cancelAll()
        }
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("sql/citus/distribute.sql")
        let statements = try String(contentsOf: script, encoding: .utf8)
            .split(separator: "\n").filter { !$0.hasPrefix("--") }.joined(separator: "\n")
            .split(separator: ";").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { !$0.isEmpty }
        try await execute(statements, on: location)
    }

    /// A new SQLite file path in a fresh temporary folder: in memory-backed `/dev/shm` where there
    /// is one. The driver syncs every commit (`synchronous = FULL`); tests trade that durability
    /// for speed, as the test PostgreSQL does with `fsync = off` (process kills, which the crash
    /// tests make, lose nothing from the page cache either way). `SYNCGATE_TEST_SHM` (set by
    /// scripts/test) is a folder of the run's own there, removed with the run.
    package nonisolated static func freshSQLitePath() throws -> String {
        let runs = ProcessInfo.processInfo.environment["SYNCGATE_TEST_SHM"].flatMap { $0.isEmpty ? nil : $0 + "/" }
        let base = runs ?? (FileManager.default.isWritableFile(atPath: "/dev/shm") ? "/dev/shm/" : NSTemporaryDirectory())
        let folder = base + "syncgate-test-\(UUID().uuidString.prefix(12))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        return folder + "/syncgate.sqlite"
    }

    static func makeTemplate(_ admin: DatabaseURL.PostgresLocation) async throws -> String {
        let name = "syncgate_template_\(ProcessInfo.processInfo.processIdentifier)"
        try await execute("DROP DATABASE IF EXISTS \(name)", on: admin)
        try await execute("CREATE DATABASE \(name)", on: admin)
        var template = admin
        template.database = name
        let driver = PostgresDriver(configuration: .init(location: template, maximumConnections: 1), logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await driver.run() }
            try await driver.migrate(logger: logger)
            group.cancelAll()
        }
        return name
    }

    /// Statements one after the other on one connection, each in its own transaction.
    static func execute(_ statements: [String], on location: DatabaseURL.PostgresLocation) async throws {
        var configuration = PostgresConnection.Configuration(
            host: location.host, port: location.port, username: location.user, password: location.password,
            database: location.database, tls: .disable
        )
        configuration.options.connectTimeout = .seconds(10)
        let connection = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: logger)
        do {
            for sql in statements {
                try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger)
            }
            try await connection.close()
        } catch {
            try? await connection.close()
            throw error
        }
    }

    package static func execute(_ sql: String, on location: DatabaseURL.PostgresLocation) async throws {
        try await execute([sql], on: location)
    }
}
