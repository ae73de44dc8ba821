import SyncGateWire
/// A feed owner: one user's private data or one household's shared data.
///
/// Its storage key is `u:<user id>` or `h:<household id>`; the fixed two-character prefix keeps
/// the encoding unambiguous whatever characters the id holds.
public enum Scope: Sendable, Hashable, Comparable, CustomStringConvertible {
    case user(String)
    case household(String)

    public init?(key: String) {
        if key.hasPrefix("u:") {
            self = .user(String(key.dropFirst(2)))
        } else if key.hasPrefix("h:") {
            self = .household(String(key.dropFirst(2)))
        } else {
            return nil
        }
    }

    public var key: String {
        switch self {
        case .user(let id): return "u:" + id
        case .household(let id): return "h:" + id
        }
    }

    public var householdID: String? {
        if case .household(let id) = self { return id }
        return nil
    }

    public var description: String { key }

    public static func < (lhs: Scope, rhs: Scope) -> Bool { lhs.key < rhs.key }
}

/// The primary key of an entity: its scope, type and id.
public struct EntityKey: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var scope: Scope
    public var entityType: String
    public var entityID: String

    public init(scope: Scope, entityType: String, entityID: String) {
        self.scope = scope
        self.entityType = entityType
        self.entityID = entityID
    }

    public var description: String { "\(scope.key)/\(entityType)/\(entityID)" }

    public static func < (lhs: EntityKey, rhs: EntityKey) -> Bool {
        (lhs.scope.key, lhs.entityType, lhs.entityID) < (rhs.scope.key, rhs.entityType, rhs.entityID)
    }
}
