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
            let existing = try String.fetchAll(
                db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'local_entity' AND substr(name, 1, ?) = ?",
                arguments: [QuerySQL.indexPrefix.count, QuerySQL.indexPrefix]
            )
            for name in Set(existing).subtracting(wanted.map(\.name)) {
                try db.execute(sql: "DROP INDEX \(QuerySQL.quoted(name))")
            }
            for index in wanted { try db.execute(sql: index.sql) }
        }
    }

    /// Runs `body` in a read-only transaction of the database.
    func read<Value: Sendable>(_ body: @escaping @Sendable (Database) throws -> Value) async throws -> Value {
        try await database.read(body)
    }
}

extension QuerySQL.SQLArgument {
    var databaseValue: DatabaseValue {
        switch self {
        case .null: return .null
        case .integer(let value): return value.databaseValue
        case .real(let value): return value.databaseValue
        case .text(let value): return value.databaseValue
        }
    }
}
