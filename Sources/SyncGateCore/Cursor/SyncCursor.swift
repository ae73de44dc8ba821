package import SyncGateWire
/// The opaque pull cursor: how far a client has read each feed it reads.
///
/// Wire form: `v1.<base64url(JSON payload)>.<checksum>`. The payload names the user it belongs to,
/// the force-resync epoch it was issued under, one position (the last sequence number read)
/// per feed, and per feed the purge floor the reader is consistent with (omitted when 0). The
/// version prefix lets later releases change the payload while still recognising (and
/// rejecting with `CURSOR_INVALID`) cursors they can no longer serve.
package struct SyncCursor: Sendable, Hashable {
    package var userID: String
    package var resyncEpoch: Int64
    package var positions: [Scope: Int64]
    /// Per feed, the purge floor already in place when the reader read it: the tombstones up to
    /// it were gone before the reader could have seen their entities. Only a purge that raises
    /// the floor past this (and past the position) can have removed a delete the reader missed.
    package var floors: [Scope: Int64]

    package init(userID: String, resyncEpoch: Int64, positions: [Scope: Int64], floors: [Scope: Int64] = [:]) {
        self.userID = userID
        self.resyncEpoch = resyncEpoch
        self.positions = positions
        self.floors = floors.filter { $0.value > 0 }
    }

    package static let maximumEncodedLength = 65_536
    static let prefix = "v1."

    package func encoded() -> String {
        var payload: JSONObject = ["u": .string(userID), "e": .int(resyncEpoch)]
        (payload["p"], payload["x"]) = Self.entries(positions)
        let seen = floors.filter { $0.value > 0 }
        if !seen.isEmpty { (payload["f"], payload["y"]) = Self.entries(seen) }
        let body = Base64URL.encode(JSONValue.object(payload).serializedBytes())
        return Self.prefix + body + "." + Self.checksum(of: body)
    }

    /// Feeds' numbers as a JSON object by feed key, and as `[key, number]` pairs those whose key
    /// is canonically equivalent to one already in the object (NFC and NFD "h:café" are two
    /// feeds, but one key of a `JSONObject`); `nil` when there are none. Releases before the
    /// pairs read the object alone.
    static func entries(_ numbers: [Scope: Int64]) -> (JSONValue, JSONValue?) {
        var object = JSONObject(minimumCapacity: numbers.count)
        for (scope, number) in numbers where object.updateValue(.int(number), forKey: scope.key) != nil {
            // A collision (rare): again in the feeds' order, so the encoding is deterministic.
            return entries(sorted: numbers)
        }
        return (.object(object), nil)
    }

    private static func entries(sorted numbers: [Scope: Int64]) -> (JSONValue, JSONValue?) {
        var object: JSONObject = [:]
        var pairs: [JSONValue] = []
        for (scope, number) in numbers.sorted(by: { $0.key < $1.key }) {
            let key = scope.key
            if object[key] == nil {
                object[key] = .int(number)
            } else {
                pairs.append([.string(key), .int(number)])
            }
        }
        return (.object(object), .array(pairs))
    }

    /// The numbers of a payload's object `name` and pairs `pairName` (see ``entries(_:)``).
    static func numbers(_ object: JSONValue, pairs: JSONValue?, what: String) throws(CursorError) -> [Scope: Int64] {
        guard let object = object.objectValue else { throw .malformed("cursor holds invalid \(what)s") }
        var entries = object.map { ($0.key, $0.value) }
        if let pairs {
            guard let array = pairs.arrayValue else { throw .malformed("cursor holds invalid \(what)s") }
            for pair in array {
                guard let pair = pair.arrayValue, pair.count == 2, let key = pair[0].stringValue else { throw .malformed("cursor holds invalid \(what)s") }
                entries.append((key, pair[1]))
            }
        }
        var numbers: [Scope: Int64] = [:]
        for (key, value) in entries {
            guard let scope = Scope(key: key), let number = value.integerValue, number >= 0, numbers[scope] == nil else {
                throw .malformed("cursor holds an invalid \(what)")
            }
            numbers[scope] = number
        }
        return numbers
    }

    /// Decodes a cursor and checks that it belongs to `userID`.
    package static func decode(_ text: String, expectedUserID: String) throws(CursorError) -> SyncCursor {
        guard text.utf8.count <= maximumEncodedLength else { throw .malformed("cursor is too long") }
        guard text.hasPrefix(prefix) else { throw .malformed("unknown cursor version") }
        let parts = text.dropFirst(prefix.count).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2 else { throw .malformed("cursor is not in the expected form") }
        let body = String(parts[0])
        guard checksum(of: body) == parts[1] else { throw .malformed("cursor checksum does not match") }
        guard let bytes = Base64URL.decode(body) else { throw .malformed("cursor is not valid base64url") }
        guard let payload = try? JSONParser(maximumDepth: 4).parse(bytes).objectValue,
            let user = payload["u"]?.stringValue,
            let epoch = payload["e"]?.integerValue, epoch >= 0,
            let feeds = payload["p"]
        else { throw .malformed("cursor payload is not in the expected form") }
        let positions = try numbers(feeds, pairs: payload["x"], what: "feed position")
        // Cursors issued before floors were recorded have none: every floor counts as new.
        let floors = try payload["f"].map { known throws(CursorError) in try numbers(known, pairs: payload["y"], what: "feed floor") } ?? [:]
        guard user.sameBytes(as: expectedUserID) else { throw .otherUser }
        guard positions.keys.contains(where: { $0 == .user(user) }) else {
            throw .malformed("cursor lacks the user's own feed")
        }
        return SyncCursor(userID: user, resyncEpoch: epoch, positions: positions, floors: floors)
    }

    /// FNV-1a (64-bit) of the body, hex: catches truncation and accidental edits, not forgery
    /// (a forged position can only make its own user re-read or skip their own data).
    static func checksum(of body: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in body.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}

package enum CursorError: Error, Sendable, Equatable, CustomStringConvertible {
    case malformed(String)
    case otherUser
    /// The cursor is older than a feed's purge floor (tombstones it has not seen were purged).
    case expired(Scope)
    /// The cursor claims a position the feed has not reached.
    case ahead(Scope)

    package var description: String {
        switch self {
        case .malformed(let reason): return "malformed cursor: \(reason)"
        case .otherUser: return "cursor belongs to another user"
        case .expired: return "cursor is older than the feed's retention horizon; pull from the beginning"
        case .ahead: return "cursor is ahead of the feed; pull from the beginning"
        }
    }

    package var protocolError: ProtocolError {
        ProtocolError(.cursorInvalid, description)
    }
}

/// RFC 4648 base64url without padding (cursors, service keys, data page positions).
package enum Base64URL {
    package static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    package static func encode(_ bytes: [UInt8]) -> String {
        var output: [UInt8] = []
        output.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index + 3 <= bytes.count {
            let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            for shift in [18, 12, 6, 0] { output.append(alphabet[Int(chunk >> UInt32(shift) & 63)]) }
            index += 3
        }
        let remaining = bytes.count - index
        if remaining == 1 {
            let chunk = UInt32(bytes[index]) << 16
            for shift in [18, 12] { output.append(alphabet[Int(chunk >> UInt32(shift) & 63)]) }
        } else if remaining == 2 {
            let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            for shift in [18, 12, 6] { output.append(alphabet[Int(chunk >> UInt32(shift) & 63)]) }
        }
        return String(decoding: output, as: UTF8.self)
    }

    package static func decode(_ text: String) -> [UInt8]? {
        var values: [UInt32] = []
        values.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): values.append(UInt32(byte - UInt8(ascii: "A")))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): values.append(UInt32(byte - UInt8(ascii: "a") + 26))
            case UInt8(ascii: "0")...UInt8(ascii: "9"): values.append(UInt32(byte - UInt8(ascii: "0") + 52))
            case UInt8(ascii: "-"): values.append(62)
            case UInt8(ascii: "_"): values.append(63)
            default: return nil
            }
        }
        if values.count % 4 == 1 { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(values.count * 3 / 4)
        var index = 0
        while index + 4 <= values.count {
            let chunk = values[index] << 18 | values[index + 1] << 12 | values[index + 2] << 6 | values[index + 3]
            output.append(UInt8(chunk >> 16 & 0xFF))
            output.append(UInt8(chunk >> 8 & 0xFF))
            output.append(UInt8(chunk & 0xFF))
            index += 4
        }
        let remaining = values.count - index
        if remaining == 2 {
            let chunk = values[index] << 18 | values[index + 1] << 12
            guard chunk & 0xFFFF == 0 else { return nil }
            output.append(UInt8(chunk >> 16 & 0xFF))
        } else if remaining == 3 {
            let chunk = values[index] << 18 | values[index + 1] << 12 | values[index + 2] << 6
            guard chunk & 0xFF == 0 else { return nil }
            output.append(UInt8(chunk >> 16 & 0xFF))
            output.append(UInt8(chunk >> 8 & 0xFF))
        }
        return output
    }
}
