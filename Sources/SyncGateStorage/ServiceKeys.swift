package import SyncGateWire

/// What a service key may do: `read` (server-side reads), `write` (server-side pushes), `admin`
/// (operating the server; each scope grants only itself).
package enum ServiceScope: String, Sendable, Hashable, CaseIterable, Comparable {
    case read, write, admin

    package static func < (lhs: ServiceScope, rhs: ServiceScope) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }

    /// The stored form: the names, sorted, comma-separated.
    package static func stored(_ scopes: Set<ServiceScope>) -> String {
        scopes.sorted().map(\.rawValue).joined(separator: ",")
    }

    /// Scopes from their stored form; a name this release does not know grants nothing.
    package static func parse(stored text: String) -> Set<ServiceScope> {
        Set(text.split(separator: ",").compactMap { ServiceScope(rawValue: String($0)) })
    }
}

/// Where a page of a scope's current entities ends: its last entity's type and id.
package struct EntityPosition: Sendable, Hashable {
    package var entityType: String
    package var entityID: String

    package init(entityType: String, entityID: String) {
        self.entityType = entityType
        self.entityID = entityID
    }
}

/// A service key as stored: its name, scopes and lifetime, never the key (only its hash).
package struct ServiceKeyRecord: Sendable, Hashable {
    package var name: String
    /// The key's last four characters, to tell keys apart in a listing.
    package var hint: String
    package var scopes: Set<ServiceScope>
    package var createdAt: Timestamp
    /// `nil` while the key is valid.
    package var revokedAt: Timestamp?

    package init(name: String, hint: String, scopes: Set<ServiceScope>, createdAt: Timestamp, revokedAt: Timestamp?) {
        self.name = name
        self.hint = hint
        self.scopes = scopes
        self.createdAt = createdAt
        self.revokedAt = revokedAt
    }
}

/// A service key to store: the hash of the key the operator was shown.
package struct NewServiceKey: Sendable, Hashable {
    package var name: String
    /// Hex SHA-256 of the whole key.
    package var keyHash: String
    package var hint: String
    package var scopes: Set<ServiceScope>

    package init(name: String, keyHash: String, hint: String, scopes: Set<ServiceScope>) {
        self.name = name
        self.keyHash = keyHash
        self.hint = hint
        self.scopes = scopes
    }

    /// A key's name: 1 to 64 characters of A-Z a-z 0-9 . _ - (it appears in logs and in
    /// `service:<name>`, the origin of what the key writes).
    package static func isValidName(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count)
            && name.utf8.allSatisfy { byte in
                (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                    || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
            }
    }
}
