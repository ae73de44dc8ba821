import Crypto
package import SyncGateCore
package import SyncGateWire

/// What a service key may do: `read` (server-side reads), `write` (server-side pushes), `admin`
/// (operating the server; each scope grants only itself).
package enum ServiceScope: String, Sendable, Hashable, CaseIterable, Comparable {
    case read, write, admin

    package static func < (lhs: ServiceScope, rhs: ServiceScope) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }

    /// The stored form: the names, sorted, comma-separated; each with `@reach` for a key with a
    /// reach, which releases before migration 0019 do not know, so they grant it nothing rather
    /// than everyone.
    package static func stored(_ scopes: Set<ServiceScope>, reached: Bool = false) -> String {
        scopes.sorted().map { reached ? $0.rawValue + reachSuffix : $0.rawValue }.joined(separator: ",")
    }

    static let reachSuffix = "@reach"

    /// Scopes from their stored form; a name this release does not know grants nothing.
    package static func parse(stored text: String) -> Set<ServiceScope> {
        Set(text.split(separator: ",").compactMap { name in
            ServiceScope(rawValue: name.hasSuffix(reachSuffix) ? String(name.dropLast(reachSuffix.utf8.count)) : String(name))
        })
    }

    /// Whether the stored scopes are a key's with a reach.
    package static func isReached(stored text: String) -> Bool { text.contains(reachSuffix) }
}

/// Whom a service key may act for: these users and these households (as their owner). A key
/// without a reach acts for everyone.
package struct ServiceReach: Sendable, Hashable {
    package var users: Set<String>
    package var households: Set<String>

    package init(users: Set<String> = [], households: Set<String> = []) {
        self.users = users
        self.households = households
    }

    /// At most this many users and households in all: each check is a set lookup, and a job's
    /// status may look up the owner of each household.
    package static let maximumEntries = 100

    /// Whether it names `scope`'s user or household, byte for byte (as the databases compare
    /// ids; a `Set<String>` lookup would take the NFC and NFD spellings of a name for one).
    package func covers(_ scope: Scope) -> Bool {
        switch scope {
        case .user(let id): users.contains { $0.sameBytes(as: id) }
        case .household(let id): households.contains { $0.sameBytes(as: id) }
        }
    }

    /// The stored and listed form: `{"users": [...], "households": [...]}`, sorted.
    package var json: JSONValue {
        ["users": .array(users.sorted().map(JSONValue.string)), "households": .array(households.sorted().map(JSONValue.string))]
    }

    /// A reach from its stored form; one this release cannot read reaches no one.
    package init(stored text: String) {
        let object = (try? JSONParser().parse(Array(text.utf8)))?.objectValue
        users = Set(object?["users"]?.arrayValue?.compactMap(\.stringValue) ?? [])
        households = Set(object?["households"]?.arrayValue?.compactMap(\.stringValue) ?? [])
    }
}

/// Where a page of a scope's current entities ends: its last entity's type and id.
package struct EntityPosition: Sendable, Hashable {
    package var entityType: String
    package var entityID: String

    /// After `entity`.
    package init(after entity: EntityState) {
        entityType = entity.key.entityType
        entityID = entity.key.entityID
    }

    /// The position in its wire form: base64url of `["type","id"]`, opaque to the caller.
    package var opaque: String {
        Base64URL.encode(JSONValue.array([.string(entityType), .string(entityID)]).serializedBytes())
    }

    /// A position from its wire form; `nil` for anything ``opaque`` did not write.
    package init?(opaque text: String) {
        guard text.utf8.count <= 8192, let bytes = Base64URL.decode(text),
            let array = try? JSONParser().parse(bytes).arrayValue, array.count == 2,
            let type = array[0].stringValue, let id = array[1].stringValue,
            // No identifier holds a control character (a NUL would be a 500 on PostgreSQL).
            !(type + id).unicodeScalars.contains(where: IdentifierLimits.isControl)
        else { return nil }
        entityType = type
        entityID = id
    }
}

/// A service key as stored: its name, scopes and lifetime, never the key (only its hash).
package struct ServiceKeyRecord: Sendable, Hashable {
    package var name: String
    /// The key's last four characters, to tell keys apart in a listing.
    package var hint: String
    package var scopes: Set<ServiceScope>
    /// Whom it may act for; `nil`: everyone.
    package var reach: ServiceReach?
    package var createdAt: Timestamp
    /// `nil` while the key is valid.
    package var revokedAt: Timestamp?

    package init(name: String, hint: String, scopes: Set<ServiceScope>, reach: ServiceReach? = nil, createdAt: Timestamp, revokedAt: Timestamp?) {
        self.name = name
        self.hint = hint
        self.scopes = scopes
        self.reach = reach
        self.createdAt = createdAt
        self.revokedAt = revokedAt
    }

    /// A record from its stored columns: scopes marked as a reached key's without a readable
    /// reach reach no one.
    package init(name: String, hint: String, storedScopes: String, storedReach: String?, createdAt: Timestamp, revokedAt: Timestamp?) {
        let reach = storedReach.map(ServiceReach.init(stored:)) ?? (ServiceScope.isReached(stored: storedScopes) ? ServiceReach() : nil)
        self.init(name: name, hint: hint, scopes: ServiceScope.parse(stored: storedScopes), reach: reach, createdAt: createdAt, revokedAt: revokedAt)
    }
}

/// A service key to store: the hash of the key the operator was shown.
package struct NewServiceKey: Sendable, Hashable {
    package var name: String
    /// Hex SHA-256 of the whole key.
    package var keyHash: String
    package var hint: String
    package var scopes: Set<ServiceScope>
    package var reach: ServiceReach?

    /// What to store of `key`: its hash and its last four characters.
    package init(name: String, key: String, scopes: Set<ServiceScope>, reach: ServiceReach? = nil) {
        self.name = name
        self.keyHash = ServiceKeySecret.hash(key)
        self.hint = ServiceKeySecret.hint(key)
        self.scopes = scopes
        self.reach = reach
    }

    /// The scopes column.
    package var storedScopes: String { ServiceScope.stored(scopes, reached: reach != nil) }

    /// The reach column (`NULL`: everyone).
    package var storedReach: String? { reach.map { $0.json.serialized() } }

    /// Why a key with these scopes and reach cannot be made, or `nil`: `admin` reaches all
    /// data, so it takes no reach, and a reach names someone, within the limit.
    package static func refusal(scopes: Set<ServiceScope>, reach: ServiceReach?) -> String? {
        guard let reach else { return nil }
        if scopes.contains(.admin) { return "an admin key reaches everything: it takes no users or households" }
        if reach.users.isEmpty && reach.households.isEmpty { return "a reach names at least one user or household" }
        if reach.users.count + reach.households.count > ServiceReach.maximumEntries {
            return "a reach names at most \(ServiceReach.maximumEntries) users and households"
        }
        if !reach.users.allSatisfy({ IdentifierLimits.isValidUserID($0) }) {
            return "a user id is 1 to \(IdentifierLimits.userID) characters without control characters"
        }
        if !reach.households.allSatisfy({ IdentifierLimits.isValid($0, length: 1...IdentifierLimits.householdID) && !$0.utf8.contains(UInt8(ascii: ":")) }) {
            return "a household id is 1 to \(IdentifierLimits.householdID) characters without control characters or ':'"
        }
        return nil
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

/// A service key: `sgk_` and 43 characters of base64url, 256 random bits. Only its SHA-256 is
/// stored, so a key is shown once, when it is created.
package enum ServiceKeySecret {
    package static let prefix = "sgk_"

    /// A new key from the system's secure random source.
    package static func generate() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return prefix + Base64URL.encode(bytes)
    }

    /// Whether `key` has a key's form: the prefix and 43 characters of base64url.
    package static func isWellFormed(_ key: String) -> Bool {
        key.utf8.count == prefix.utf8.count + 43 && key.hasPrefix(prefix)
            && key.utf8.dropFirst(prefix.utf8.count).allSatisfy(Base64URL.alphabet.contains)
    }

    /// The stored form of `key`: its SHA-256 in lowercase hex.
    package static func hash(_ key: String) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var hex: [UInt8] = []
        hex.reserveCapacity(64)
        for byte in SHA256.hash(data: Array(key.utf8)) {
            hex.append(digits[Int(byte >> 4)])
            hex.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: hex, as: UTF8.self)
    }

    /// What a listing shows of a key: its last four characters.
    package static func hint(_ key: String) -> String {
        String(key.suffix(4))
    }

    /// A key for `name` with `scopes` (and `reach`): the key to show the operator once, and what to store.
    package static func new(name: String, scopes: Set<ServiceScope>, reach: ServiceReach? = nil) -> (key: String, stored: NewServiceKey) {
        let key = generate()
        return (key, NewServiceKey(name: name, key: key, scopes: scopes, reach: reach))
    }
}
