import SyncGateWire
/// A feed owner: one user's private data or one household's shared data.
///
/// Its storage key is `u:<user id>` or `h:<household id>`; the fixed two-character prefix keeps
/// the encoding unambiguous whatever characters the id holds.
package enum Scope: Sendable, Hashable, Comparable, CustomStringConvertible {
    case user(String)
    case household(String)

    package init?(key: String) {
        // By bytes: `hasPrefix` compares characters, and an id that begins with a combining mark
        // joins the `:` into one character with it ("h:\u{301}x" has no prefix "h:").
        let bytes = key.utf8
        guard bytes.count >= 2, bytes.dropFirst().first == UInt8(ascii: ":") else { return nil }
        let id = String(Substring(bytes.dropFirst(2)))
        switch bytes.first {
        case UInt8(ascii: "u"): self = .user(id)
        case UInt8(ascii: "h"): self = .household(id)
        default: return nil
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

    // Ids compare by their bytes, as the databases compare them (see `String.sameBytes(as:)`).
    package static func == (lhs: Scope, rhs: Scope) -> Bool {
        switch (lhs, rhs) {
        case (.user(let a), .user(let b)), (.household(let a), .household(let b)): a.sameBytes(as: b)
        default: false
        }
    }

    package func hash(into hasher: inout Hasher) {
        switch self {
        case .user(let id):
            hasher.combine(0 as UInt8)
            id.hashBytes(into: &hasher)
        case .household(let id):
            hasher.combine(1 as UInt8)
            id.hashBytes(into: &hasher)
        }
    }

    package static func < (lhs: Scope, rhs: Scope) -> Bool { lhs.key.utf8.lexicographicallyPrecedes(rhs.key.utf8) }
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

    // By bytes, as the databases compare keys (see `String.sameBytes(as:)`).
    package static func == (lhs: EntityKey, rhs: EntityKey) -> Bool {
        lhs.scope == rhs.scope && lhs.entityType.sameBytes(as: rhs.entityType) && lhs.entityID.sameBytes(as: rhs.entityID)
    }

    package func hash(into hasher: inout Hasher) {
        hasher.combine(scope)
        entityType.hashBytes(into: &hasher)
        entityID.hashBytes(into: &hasher)
    }

    package static func < (lhs: EntityKey, rhs: EntityKey) -> Bool {
        if lhs.scope != rhs.scope { return lhs.scope < rhs.scope }
        if !lhs.entityType.sameBytes(as: rhs.entityType) { return lhs.entityType.utf8.lexicographicallyPrecedes(rhs.entityType.utf8) }
        return lhs.entityID.utf8.lexicographicallyPrecedes(rhs.entityID.utf8)
    }
}

/// A string id as a key (a user id, an idempotency key): compared, hashed and ordered by its
/// UTF-8 bytes, as the databases compare ids (see `String.sameBytes(as:)`); NFC and NFD "josé"
/// are two users.
package struct ExactKey: Sendable, Hashable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral {
    package var id: String

    package init(_ id: String) { self.id = id }
    package init(stringLiteral id: String) { self.id = id }

    package var description: String { id }

    package static func == (lhs: ExactKey, rhs: ExactKey) -> Bool { lhs.id.sameBytes(as: rhs.id) }
    package func hash(into hasher: inout Hasher) { id.hashBytes(into: &hasher) }
    package static func < (lhs: ExactKey, rhs: ExactKey) -> Bool { lhs.id.utf8.lexicographicallyPrecedes(rhs.id.utf8) }
}

extension String {
    /// Whether the two hold the same UTF-8 bytes: how PostgreSQL and SQLite compare keys
    /// (``UTF8Bytes/equal(_:_:)``).
    @inline(__always)
    package func sameBytes(as other: String) -> Bool { UTF8Bytes.equal(self, other) }

    /// Feeds the UTF-8 bytes and their count to `hasher`: equal exactly when `sameBytes(as:)` is.
    @inline(__always)
    package func hashBytes(into hasher: inout Hasher) { UTF8Bytes.hash(self, into: &hasher) }
}
