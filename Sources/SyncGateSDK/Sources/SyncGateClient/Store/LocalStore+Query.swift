import SyncGateWire
import GRDB

extension LocalStore {
    static func entities(_ db: Database, _ query: QuerySQL) throws -> [SyncEntity] {
        try Row.fetchAll(db, sql: query.sql, arguments: StatementArguments(query.arguments.map(\.databaseValue))).map(entity)
    }

    func entities(_ query: QuerySQL) async throws -> [SyncEntity] {
        try await database.read { db in try Self.entities(db, query) }
    }

    /// Makes the declared indexes and drops the ones this client made that are no longer declared.
    func declare(indexes: [LocalIndex]) throws {
        let wanted = try indexes.map(QuerySQL.index)
        try database.write { db in
            let existing = try Self.declaredIndexNames(db)
            for name in Set(existing).subtracting(wanted.map(\.name)) {
                try db.execute(sql: "DROP INDEX \(QuerySQL.quoted(name))")
            }
            for index in wanted { try db.execute(sql: index.sql) }
        }
    }

    /// Whether the view holds nothing: a first sync is about to fill it.
    func isEmpty() async throws -> Bool {
        try await database.read { db in try !Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM local_entity)")! }
    }

    /// Drops the declared indexes (a bootstrap makes them again once the store is filled: one
    /// sort of every row is cheaper than keeping the index up to date row by row).
    func dropDeclaredIndexes() async throws {
        try await database.write { db in
            for name in try Self.declaredIndexNames(db) { try db.execute(sql: "DROP INDEX \(QuerySQL.quoted(name))") }
        }
    }

    /// Makes the declared indexes again after ``dropDeclaredIndexes()``.
    func remake(indexes: [LocalIndex]) async throws {
        let wanted = try indexes.map(QuerySQL.index)
        try await database.write { db in
            for index in wanted { try db.execute(sql: index.sql) }
        }
    }

    private static func declaredIndexNames(_ db: Database) throws -> [String] {
        try String.fetchAll(
            db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'local_entity' AND substr(name, 1, ?) = ?",
            arguments: [QuerySQL.indexPrefix.count, QuerySQL.indexPrefix]
        )
    }

    /// Runs `body` in a read-only transaction of the database.
    func read<Value: Sendable>(_ body: @escaping @Sendable (Database) throws -> Value) async throws -> Value {
        try await database.read(body)
    }
}

extension QuerySQL.SQLArgument {
    var databaseValue: DatabaseValue {
        switch self {
        case .integer(let value): return value.databaseValue
        case .real(let value): return value.databaseValue
        case .text(let value): return value.databaseValue
        }
    }
}
