import SyncGateWire
/// A feed owner: one user's private data or one household's shared data.
///
/// Its storage key is `u:<user id>` or `h:<household id>`; the fixed two-character prefix keeps
/// the encoding unambiguous whatever characters the id holds.
package enum Scope: Sendable, Hashable, Comparable, CustomStringConvertible {
    case user(String)
    case household(String)

    package init?(key: String) {
        if key.hasPrefix("u:") {
            self = .user(String(key.dropFirst(2)))
        } else if key.hasPrefix("h:") {
            self = .household(String(key.dropFirst(2)))
        } else {
            return nil
        }
    }

    package var key: String {
        switch self {
        case .user(let id): return "u:" + id
        case .household(let id): return "h:" + id
        }
    }

    package var householdID: String? {
        if case .household(let id) = self { return id }
        return nil
    }

    package var description: String { key }

    package static func < (lhs: Scope, rhs: Scope) -> Bool { lhs.key < rhs.key }
}

/// The primary key of an entity: its scope, type and id.
package struct EntityKey: Sendable, Hashable, Comparable, CustomStringConvertible {
    package var scope: Scope
    package var entityType: String
    package var entityID: String

    package init(scope: Scope, entityType: String, entityID: String) {
        self.scope = scope
        self.entityType = entityType
        self.entityID = entityID
    }

    package var description: String { "\(scope.key)/\(entityType)/\(entityID)" }

    package static func < (lhs: EntityKey, rhs: EntityKey) -> Bool {
        (lhs.scope.key, lhs.entityType, lhs.entityID) < (rhs.scope.key, rhs.entityType, rhs.entityID)
    }
}
