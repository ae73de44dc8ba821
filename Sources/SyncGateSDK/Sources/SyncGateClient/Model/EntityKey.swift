import SyncGateWire
/// Names one entity: its type, its id, and the household it belongs to (`nil` for the user's own).
///
/// The server keeps one entity per household for the same type and id, so the household is part
/// of the identity.
public struct EntityKey: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The entity type, e.g. `inventory`.
    public var entityType: String
    /// The entity id, unique within its type and household.
    public var entityID: String
    /// The household of a household-scoped type; `nil` for the user's own entities.
    public var householdID: String?

    /// A key. For `households` the household is the id itself, and for `household_members` the
    /// part of the id before `:`, whatever `householdID` says. An empty `householdID` is `nil`
    /// (no household id is empty, and the store keeps the user's own entities under `""`).
    public init(entityType: String, entityID: String, householdID: String? = nil) {
        self.entityType = entityType
        self.entityID = entityID
        self.householdID = Self.household(of: entityType, id: entityID, given: householdID.flatMap { $0.isEmpty ? nil : $0 })
    }

    /// The household column value: `""` for the user's own entities.
    var scopeColumn: String { householdID ?? "" }

    init(scopeColumn: String, entityType: String, entityID: String) {
        self.entityType = entityType
        self.entityID = entityID
        self.householdID = scopeColumn.isEmpty ? nil : scopeColumn
    }

    static func household(of entityType: String, id: String, given: String?) -> String? {
        switch entityType {
        case BuiltInTypes.households:
            return id
        case BuiltInTypes.householdMembers:
            // At the first ':' byte, as the server splits it (a ':' and a combining mark are one Character).
            guard let colon = id.utf8.firstIndex(of: UInt8(ascii: ":")), colon != id.utf8.startIndex else { return given }
            return String(decoding: id.utf8[..<colon], as: UTF8.self)
        default:
            return given
        }
    }

    /// Whether the two name the same entity: the same bytes in each part, as the server and the
    /// local store compare ids (NFC and NFD "café" are two entities; `String ==` would fold them).
    public static func == (lhs: EntityKey, rhs: EntityKey) -> Bool {
        UTF8Bytes.equal(lhs.scopeColumn, rhs.scopeColumn) && UTF8Bytes.equal(lhs.entityType, rhs.entityType)
            && UTF8Bytes.equal(lhs.entityID, rhs.entityID)
    }

    public func hash(into hasher: inout Hasher) {
        UTF8Bytes.hash(householdID ?? "", into: &hasher)
        UTF8Bytes.hash(entityType, into: &hasher)
        UTF8Bytes.hash(entityID, into: &hasher)
    }

    /// Orders keys by household (the user's own first), type, then id, each by its bytes.
    public static func < (lhs: EntityKey, rhs: EntityKey) -> Bool {
        let (left, right) = (lhs.householdID ?? "", rhs.householdID ?? "")
        if !UTF8Bytes.equal(left, right) { return left.utf8.lexicographicallyPrecedes(right.utf8) }
        if !UTF8Bytes.equal(lhs.entityType, rhs.entityType) { return lhs.entityType.utf8.lexicographicallyPrecedes(rhs.entityType.utf8) }
        return lhs.entityID.utf8.lexicographicallyPrecedes(rhs.entityID.utf8)
    }

    /// `household/type/id`, or `type/id` for the user's own entities.
    public var description: String {
        householdID.map { "\($0)/\(entityType)/\(entityID)" } ?? "\(entityType)/\(entityID)"
    }
}

/// The entity types every SyncGate server has.
enum BuiltInTypes {
    static let households = "households"
    static let householdMembers = "household_members"
}
