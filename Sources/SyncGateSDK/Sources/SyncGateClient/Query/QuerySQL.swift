import SyncGateWire

/// The SQL of a query on the local view (`local_entity`): built without a database, so that every
/// condition's text and arguments are unit-tested, and index expressions match query expressions.
struct QuerySQL: Sendable, Hashable {
    var sql: String
    var arguments: [SQLArgument]

    /// A value bound to a statement.
    enum SQLArgument: Sendable, Hashable {
        case integer(Int64)
        case real(Double)
        case text(String)
    }

    init(_ query: EntityQuery) throws {
        var conditions = ["entity_type = ?"]
        var arguments: [SQLArgument] = [.text(query.type)]
        switch query.scope {
        case .all: break
        case .personal: conditions.append("household_id = ''")
        case .household(let id):
            conditions.append("household_id = ?")
            arguments.append(.text(id))
        }
        for filter in query.filters {
            let path = try Self.path(filter.field)
            let field = "json_extract(data, \(path))"
            switch filter.condition {
            case .equals(.null):
                conditions.append("\(field) IS NULL")
            case .equals(let value):
                conditions.append("\(field) = ?")
                arguments.append(try Self.argument(value, filter))
            case .notEquals(.null):
                conditions.append("\(field) IS NOT NULL")
            case .notEquals(let value):
                conditions.append("\(field) IS NOT ?")
                arguments.append(try Self.argument(value, filter))
            case .less(let value, let orEqual):
                conditions.append("\(field) \(orEqual ? "<=" : "<") ?")
                arguments.append(try Self.argument(value, filter))
            case .greater(let value, let orEqual):
                conditions.append("\(field) \(orEqual ? ">=" : ">") ?")
                arguments.append(try Self.argument(value, filter))
            case .between(let lower, let upper):
                conditions.append("\(field) BETWEEN ? AND ?")
                arguments.append(try Self.argument(lower, filter))
                arguments.append(try Self.argument(upper, filter))
            case .oneOf(let values):
                guard !values.isEmpty else {
                    conditions.append("0")
                    continue
                }
                conditions.append("\(field) IN (\(Array(repeating: "?", count: values.count).joined(separator: ", ")))")
                for value in values { arguments.append(try Self.argument(value, filter)) }
            case .contains(let text):
                // instr, not LIKE: no wildcard characters to escape, and case-sensitive as documented.
                conditions.append("json_type(data, \(path)) = 'text' AND instr(\(field), ?) > 0")
                arguments.append(.text(text))
            case .hasElement(let value):
                conditions.append(
                    "json_type(data, \(path)) = 'array' AND EXISTS (SELECT 1 FROM json_each(data, \(path)) WHERE value = ?)"
                )
                arguments.append(try Self.argument(value, filter))
            }
        }
        var order = try query.order.map { "\(try Self.expression($0.field)) \($0.direction == .ascending ? "ASC" : "DESC")" }
        // Ties go the way of the last key, so that an index ending in the tie-breakers serves the
        // whole order, read forwards or backwards.
        let ties = query.order.last?.direction == .descending ? " DESC" : ""
        order += ["household_id\(ties)", "entity_id\(ties)"]
        var sql = "SELECT * FROM local_entity WHERE \(conditions.joined(separator: " AND ")) ORDER BY \(order.joined(separator: ", "))"
        if let limit = query.limit {
            guard limit >= 0 else { throw SyncGateClientError(.invalidArgument, "a query's limit cannot be negative (got \(limit))") }
            sql += " LIMIT ?"
            arguments.append(.integer(Int64(limit)))
        }
        self.sql = sql
        self.arguments = arguments
    }

    /// The statement that makes a declared index, and its name (which says what it indexes, so
    /// that a changed declaration is a different index).
    static func index(_ index: LocalIndex) throws -> (name: String, sql: String) {
        guard !index.fields.isEmpty else { throw SyncGateClientError(.invalidArgument, "an index on '\(index.type)' needs at least one field") }
        let expressions = try index.fields.map(expression)
        let name = "app_index:\(index.type):\(index.fields.joined(separator: ","))"
        let quotedName = quoted(name)
        // Equality on the type first, so one index serves one type's queries among every type's
        // rows; the tie-breakers last, so that it also serves a query's whole order.
        let sql = "CREATE INDEX IF NOT EXISTS \(quotedName) ON local_entity (entity_type, \(expressions.joined(separator: ", ")), household_id, entity_id)"
        return (name, sql)
    }

    /// A SQL identifier in double quotes.
    static func quoted(_ name: String) -> String {
        "\"" + name.split(separator: "\"", omittingEmptySubsequences: false).joined(separator: "\"\"") + "\""
    }

    /// Index names this client made start so; others are left alone.
    static let indexPrefix = "app_index:"

    /// `json_extract(data, '$.a.b')`: the same text in queries and indexes, so SQLite matches them.
    static func expression(_ field: String) throws -> String {
        "json_extract(data, \(try path(field)))"
    }

    static func path(_ field: String) throws -> String {
        let parts = field.split(separator: ".", omittingEmptySubsequences: false)
        for part in parts {
            guard let first = part.first, first == "_" || first.isASCIILetter,
                part.allSatisfy({ $0 == "_" || $0.isASCIILetter || ($0.isASCII && $0.isNumber) })
            else {
                throw SyncGateClientError(
                    .invalidArgument, "'\(field)' is not a field: dotted parts of letters, digits and _, not starting with a digit"
                )
            }
        }
        return "'$.\(field)'"
    }

    /// A value compared with a field. Not null: a comparison with NULL matches nothing in SQL, so
    /// null is asked for only with equals and notEquals, which test IS NULL.
    static func argument(_ value: JSONValue, _ filter: QueryFilter) throws -> SQLArgument {
        switch value {
        case .null:
            throw SyncGateClientError(.invalidArgument, "'\(filter.field)': compare with null only by equals or notEquals")
        case .bool(let bool): return .integer(bool ? 1 : 0)
        case .int(let int): return .integer(int)
        case .double(let double): return .real(double)
        case .string(let string): return .text(string)
        case .array, .object:
            throw SyncGateClientError(.invalidArgument, "a query compares '\(filter.field)' with strings, numbers, booleans or null, not arrays or objects")
        }
    }
}

extension Character {
    fileprivate var isASCIILetter: Bool { isASCII && isLetter }
}
