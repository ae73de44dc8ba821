import Foundation
import GRDB
import HTTPTypes
import PostgresNIO
import SyncGateCore
import SyncGateWire
import SyncGatePostgres
import SyncGateSQLite
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// The schema: each driver's folder under `sql/` is what the binary embeds, and upgrading a
/// database keeps its data working.
@Suite(.timeLimit(.minutes(10))) struct MigrationTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let sources = root.appendingPathComponent("Sources")

    static func embedded(_ driver: Driver) -> [Migration] {
        switch driver {
        case .postgres: PostgresDriver.migrations
        case .sqlite: SQLiteDriver.migrations
        }
    }

    /// Files are `NNNN_name.sql`, numbered 1, 2, … without gaps, and every one is embedded, unchanged.
    @Test(arguments: Driver.allCases)
    func theFolderIsWhatTheBinaryEmbeds(_ driver: Driver) throws {
        let folder = Self.root.appendingPathComponent(driver == .postgres ? "sql/postgres" : "sql/sqlite")
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".sql") }.sorted()
        var found: [Migration] = []
        for file in files {
            let match = try #require(file.wholeMatch(of: /(\d{4})_([a-z0-9_]+)\.sql/), "\(file) is not named NNNN_name.sql")
            let sql = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
            found.append(Migration(version: Int(match.1)!, name: String(match.2), sql: sql))
        }
        #expect(found.map(\.version) == Array(1...found.count), "numbered without gaps")
        let embedded = Self.embedded(driver)
        #expect(found.map { "\($0.version)_\($0.name)" } == embedded.map { "\($0.version)_\($0.name)" }, "every file is listed in the driver's migrations")
        #expect(found.map(\.sql) == embedded.map(\.sql), "and in Package.swift's resources")
    }

    /// A rolling upgrade runs the new release's migrations first: the old fronts must stay ready
    /// unless a migration breaks them. Newer migrations are planted as a newer release's migrator
    /// records them.
    @Test(arguments: Driver.selected)
    func aNewerReleasesAdditiveMigrationKeepsThisReleaseReadyABreakingOneDoesNot(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 0) { http in
            let latest = Self.embedded(driver).last!.version
            let additive = "INSERT INTO syncgate_migrations (version, name, \(driver == .sqlite ? "applied_at, " : "")compatible_from) VALUES"
            try await http.store.execute("\(additive) (\(latest + 1), 'future_additive', \(driver == .sqlite ? "0, " : "")\(latest))")
            var status = try await http.store.store.schemaStatus()
            #expect(!status.isCurrent && status.isServable && status.problem == nil, "\(status)")
            #expect(try await http.send(.get, "/readyz", headers: [:]).status == 200)

            try await http.store.execute("\(additive) (\(latest + 2), 'future_breaking', \(driver == .sqlite ? "0, " : "")\(latest + 2))")
            status = try await http.store.store.schemaStatus()
            #expect(!status.isServable)
            let response = try await http.send(.get, "/readyz", headers: [:])
            #expect(response.status == 503)
            #expect(response.json?["error"]?["message"]?.stringValue?.contains("upgrade it") == true, "\(String(describing: response.json))")
        }
    }

    /// Which release a migrated database still serves, from the migrations' own flags.
    @Test func compatibilityFollowsTheLastBreakingMigration() {
        let migrations = [
            Migration(version: 1, name: "a", sql: ""), Migration(version: 2, name: "b", sql: "", breaksOlderServers: false),
            Migration(version: 3, name: "c", sql: ""), Migration(version: 4, name: "d", sql: "", breaksOlderServers: false),
        ]
        #expect((1...4).map { Migration.compatibleFrom($0, in: migrations) } == [1, 1, 3, 3])
        #expect(SchemaStatus(applied: 4, latest: 3, compatibleFrom: 3).isServable)
        #expect(!SchemaStatus(applied: 4, latest: 2, compatibleFrom: 3).isServable)
        #expect(!SchemaStatus(applied: 2, latest: 3, compatibleFrom: 1).isServable)
        // A row from a migrator before compatibility was recorded: only an equal release serves.
        #expect(!SchemaStatus(applied: 4, latest: 3).isServable)
        #expect(SchemaStatus(applied: 3, latest: 3).isServable)
    }

    @Test(arguments: Driver.selected)
    func migratingTwiceAppliesNothingTheSecondTime(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            #expect(try await harness.store.migrate(logger: StoreHarness.logger) == [])
            let status = try await harness.store.schemaStatus()
            #expect(status.isCurrent && status.applied == Self.embedded(driver).count)
        }
    }

    /// A job's payload and results, once its row passes PostgreSQL's ~2 KB threshold, are stored
    /// compressed with lz4 (migration 9), not pglz: pglz took 7.5 % of PostgreSQL's CPU in a
    /// stream of 1,000-operation pushes. The test server is built with lz4, so it must be lz4 here.
    @Test func aJobsPayloadAndResultsAreCompressedWithLZ4() async throws {
        try await StoreHarness.with(.postgres) { harness in
            let results = try await harness.apply((0..<60).map { Op.create("contacts", "c\($0)", ["name": .string("contact number \($0)")]) })
            #expect(results.count == 60)
            let stored = try await harness.queryTexts(
                "SELECT concat_ws(' ', pg_column_compression(payload), pg_column_compression(results)) FROM jobs"
            )
            #expect(stored == ["lz4 lz4"])
        }
    }

    /// A database at version 1 keeps its food logs counted in the daily summaries after the
    /// upgrade to group keys: migration 2 files every stored log under its day.
    @Test(arguments: Driver.selected)
    func upgradingFromVersionOneFilesStoredLogsUnderTheirDay(_ driver: Driver) async throws {
        let url = try await Self.databaseAtVersionOne(driver)
        defer { if case .sqlite(let path) = url { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) } }
        let log = #"{"loggedDate":"2026-01-15","mealType":"lunch","items":[{"id":"a","calories":100}]}"#
        let insert = """
            INSERT INTO entities (scope, entity_type, entity_id, version, data, meta, client_ts, updated_at)
            VALUES ('u:alice', 'foodLogs', 'old', 1, '\(log)', NULL, 0, 0)
            """
        try await Self.execute([insert], on: url)
        try await StoreHarness.withExisting(url) { harness in
            #expect(try await harness.store.schemaStatus().isCurrent)
            let results = try await harness.apply([
                Op.create("foodLogs", "new", ["loggedDate": "2026-01-15", "mealType": "dinner", "items": [["id": "b", "calories": 50]]])
            ])
            #expect(results.map(\.outcome) == ["applied"])
            let summary = try await harness.pullAll().changes.last { $0.entityType == "dailySummaries" }
            #expect(summary?.data?["calories"] == 150)
            #expect(summary?.data?["meal_count"] == 2)
        }
    }

    /// A new database with only the first migration applied, as a release before version 2 left it.
    static func databaseAtVersionOne(_ driver: Driver) async throws -> DatabaseURL {
        let first = embedded(driver)[0]
        switch driver {
        case .postgres:
            let location = try await TestDatabases.shared.freshEmptyPostgres()
            let url = DatabaseURL.postgres(location)
            try await execute(
                SQLScript.statements(first.sql) + [
                    "CREATE TABLE syncgate_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
                    "INSERT INTO syncgate_migrations (version, name) VALUES (1, 'initial')",
                ],
                on: url
            )
            return url
        case .sqlite:
            let url = DatabaseURL.sqlite(path: try TestDatabases.freshSQLitePath())
            try await execute(
                [
                    first.sql,
                    "CREATE TABLE syncgate_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
                    "INSERT INTO syncgate_migrations (version, name, applied_at) VALUES (1, 'initial', 0)",
                ],
                on: url
            )
            return url
        }
    }

    static func execute(_ statements: [String], on url: DatabaseURL) async throws {
        switch url {
        case .postgres(let location):
            try await withConnection(location) { connection in
                for statement in statements { try await connection.query(PostgresQuery(unsafeSQL: statement), logger: TestDatabases.logger) }
            }
        case .sqlite(let path):
            let queue = try DatabaseQueue(path: path)
            try await queue.write { db in
                for statement in statements { try db.execute(sql: statement) }
            }
        }
    }
}
