public import SyncGateWire

/// A query over one entity type's documents in the local store: filters on JSON fields, an
/// order and a limit, served by SQLite (with an index when the app declares one,
/// ``SyncClient/Configuration/indexes``).
///
/// ```swift
/// let lunch = EntityQuery("foodLogs")
///     .filter(.equals("mealType", "lunch"))
///     .filter(.between("loggedDate", "2026-01-01", "2026-01-31"))
///     .sorted(by: "loggedDate", .descending)
///     .limit(20)
/// for try await logs in client.observe(lunch) { render(logs) }
/// ```
///
/// A field is a top-level key or a dotted path into nested objects (`totals.calories`); each part
/// is letters, digits and `_`, not starting with a digit. Values compare as SQLite compares
/// them: numbers by value (integers and doubles alike), strings by their bytes, `true` and
/// `false` as 1 and 0, and any number before any string. A missing field is `null`.
public struct EntityQuery: Sendable, Hashable {
    /// The entity type.
    public var type: String
    /// Whose entities: every household's and the user's own, the user's own, or one household's.
    public var scope: ReadScope
    /// Conditions every result meets.
    public var filters: [QueryFilter] = []
    /// The order, most significant first; ties go by household and id, in the direction of the last key.
    public var order: [QuerySort] = []
    /// At most this many results.
    public var limit: Int?

    /// All entities of `type` in `scope`, ordered by household and id.
    public init(_ type: String, in scope: ReadScope = .all) {
        self.type = type
        self.scope = scope
    }

    /// The query with one more condition.
    public func filter(_ filter: QueryFilter) -> EntityQuery {
        var query = self
        query.filters.append(filter)
        return query
    }

    /// The query ordered by `field` after the orders it has.
    public func sorted(by field: String, _ direction: QuerySort.Direction = .ascending) -> EntityQuery {
        var query = self
        query.order.append(QuerySort(field: field, direction: direction))
        return query
    }

    /// The query returning at most `count` entities.
    public func limit(_ count: Int) -> EntityQuery {
        var query = self
        query.limit = count
        return query
    }
}

/// A condition on one field of a document.
public struct QueryFilter: Sendable, Hashable {
    enum Condition: Sendable, Hashable {
        case equals(JSONValue)
        case notEquals(JSONValue)
        case less(JSONValue, orEqual: Bool)
        case greater(JSONValue, orEqual: Bool)
        case between(JSONValue, JSONValue)
        case oneOf([JSONValue])
        case contains(String)
        case hasElement(JSONValue)
    }

    var field: String
    var condition: Condition

    /// The field equals `value` (`.null`: the field is missing or null).
    public static func equals(_ field: String, _ value: JSONValue) -> QueryFilter { .init(field: field, condition: .equals(value)) }
    /// The field differs from `value` (`.null`: the field is present and not null); a missing field differs from every other value.
    public static func notEquals(_ field: String, _ value: JSONValue) -> QueryFilter { .init(field: field, condition: .notEquals(value)) }
    /// The field is below `value`.
    public static func lessThan(_ field: String, _ value: JSONValue) -> QueryFilter { .init(field: field, condition: .less(value, orEqual: false)) }
    /// The field is at most `value`.
    public static func lessThanOrEqual(_ field: String, _ value: JSONValue) -> QueryFilter { .init(field: field, condition: .less(value, orEqual: true)) }
    /// The field is above `value`.
    public static func greaterThan(_ field: String, _ value: JSONValue) -> QueryFilter { .init(field: field, condition: .greater(value, orEqual: false)) }
    /// The field is at least `value`.
    public static func greaterThanOrEqual(_ field: String, _ value: JSONValue) -> QueryFilter { .init(field: field, condition: .greater(value, orEqual: true)) }
    /// The field is within `lower...upper`.
    public static func between(_ field: String, _ lower: JSONValue, _ upper: JSONValue) -> QueryFilter { .init(field: field, condition: .between(lower, upper)) }
    /// The field equals one of `values` (strings, numbers or booleans).
    public static func `in`(_ field: String, _ values: [JSONValue]) -> QueryFilter { .init(field: field, condition: .oneOf(values)) }
    /// The field is a string containing `text` (case-sensitive).
    public static func contains(_ field: String, _ text: String) -> QueryFilter { .init(field: field, condition: .contains(text)) }
    /// The field is an array with an element equal to `value` (a string, number or boolean).
    public static func hasElement(_ field: String, _ value: JSONValue) -> QueryFilter { .init(field: field, condition: .hasElement(value)) }
}

/// One key of a query's order.
public struct QuerySort: Sendable, Hashable {
    /// Up or down.
    public enum Direction: Sendable, Hashable {
        /// Smallest first; a missing field (null) comes first.
        case ascending
        /// Largest first; a missing field (null) comes last.
        case descending
    }

    /// The field.
    public var field: String
    /// The direction.
    public var direction: Direction

    /// An order by `field`.
    public init(field: String, direction: Direction = .ascending) {
        self.field = field
        self.direction = direction
    }
}

/// A SQLite index the app declares on fields of one type's documents, so that queries filtering
/// or sorting on them read the index instead of every document of the type.
///
/// An index on `(field1, field2)` serves equality on `field1` with a range or order on `field2`,
/// as any SQLite index does. Indexes are made when the client opens its database, and indexes
/// no longer declared are dropped then.
public struct LocalIndex: Sendable, Hashable {
    /// The entity type.
    public var type: String
    /// The fields, most significant first (dotted paths allowed, as in ``EntityQuery``).
    public var fields: [String]

    /// An index on `fields` of `type`'s documents.
    public init(type: String, fields: [String]) {
        self.type = type
        self.fields = fields
    }
}
