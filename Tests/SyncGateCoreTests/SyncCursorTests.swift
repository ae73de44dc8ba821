import Testing

@testable import SyncGateCore
import SyncGateWire

@Suite(.timeLimit(.minutes(10))) struct SyncCursorTests {
    let cursor = SyncCursor(
        userID: "alice:ü/1",
        resyncEpoch: 3,
        positions: [.user("alice:ü/1"): 42, .household("h:1"): 0, .household("h2"): 9_007_199_254_740_993]
    )

    @Test func roundTrips() throws {
        let encoded = cursor.encoded()
        #expect(encoded.hasPrefix("v1."))
        #expect(try SyncCursor.decode(encoded, expectedUserID: "alice:ü/1") == cursor)
    }

    @Test func floorsRoundTripAndOldCursorsHaveNone() throws {
        var withFloors = cursor
        withFloors.floors = [.household("h2"): 7]
        let decoded = try SyncCursor.decode(withFloors.encoded(), expectedUserID: "alice:ü/1")
        #expect(decoded == withFloors)
        #expect(decoded.floors == [.household("h2"): 7])
        // Zero floors are not written, so cursors without purges keep their old form.
        #expect(SyncCursor(userID: "a", resyncEpoch: 0, positions: [.user("a"): 1], floors: [.user("a"): 0]).encoded()
            == SyncCursor(userID: "a", resyncEpoch: 0, positions: [.user("a"): 1]).encoded())
        #expect(try SyncCursor.decode(cursor.encoded(), expectedUserID: "alice:ü/1").floors == [:])
    }

    /// NFC and NFD "café" are two households: the cursor keeps a position (and a floor) for each,
    /// though a JSON object's keys would fold them into one.
    @Test func canonicallyEquivalentFeedsKeepTheirOwnPositions() throws {
        let (nfc, nfd) = ("caf\u{E9}", "cafe\u{301}")
        let both = SyncCursor(
            userID: "u", resyncEpoch: 1, positions: [.user("u"): 1, .household(nfc): 5, .household(nfd): 9],
            floors: [.household(nfc): 2, .household(nfd): 3]
        )
        let decoded = try SyncCursor.decode(both.encoded(), expectedUserID: "u")
        #expect(decoded == both)
        #expect(decoded.positions[.household(nfd)] == 9 && decoded.positions[.household(nfc)] == 5)
        // Without such feeds the cursor keeps the form earlier releases read: no pairs.
        let body = cursor.encoded().dropFirst(3).split(separator: ".")[0]
        let payload = try JSONValue(parsing: try #require(Base64URL.decode(String(body)))).objectValue
        #expect(payload.map { Set($0.keys) } == ["u", "e", "p"])
    }

    @Test func encodingIsURLSafeAndDeterministic() {
        let encoded = cursor.encoded()
        #expect(encoded == cursor.encoded())
        #expect(encoded.allSatisfy { $0.isLetter || $0.isNumber || "-_.".contains($0) })
    }

    @Test func rejectsAnotherUsersCursor() {
        #expect(throws: CursorError.otherUser) { try SyncCursor.decode(cursor.encoded(), expectedUserID: "bob") }
        // Another spelling of the same name is another user (the databases compare bytes).
        let composed = SyncCursor(userID: "jos\u{E9}", resyncEpoch: 0, positions: [.user("jos\u{E9}"): 1])
        #expect(throws: CursorError.otherUser) { try SyncCursor.decode(composed.encoded(), expectedUserID: "jose\u{301}") }
    }

    @Test func rejectsEveryCorruption() {
        let encoded = cursor.encoded()
        var corruptions = ["", "v1.", "v2." + encoded.dropFirst(3), "v1..", encoded + "x", String(encoded.dropLast()), "garbage"]
        // Flip every character of the body in turn: the checksum or the decoder must notice.
        let characters = Array(encoded)
        for index in 3..<characters.count where characters[index] != "." {
            var mutated = characters
            mutated[index] = characters[index] == "A" ? "B" : "A"
            corruptions.append(String(mutated))
        }
        for corrupted in corruptions {
            #expect(throws: CursorError.self, "\(corrupted)") { try SyncCursor.decode(corrupted, expectedUserID: "alice:ü/1") }
        }
    }

    @Test func rejectsWellFormedButInvalidPayloads() {
        func forge(_ payload: JSONValue) -> String {
            let body = Base64URL.encode(payload.serializedBytes())
            return "v1." + body + "." + SyncCursor.checksum(of: body)
        }
        let payloads: [JSONValue] = [
            ["u": "alice", "e": 0, "p": ["u:alice": -1]],
            ["u": "alice", "e": 0, "p": ["x:alice": 1]],
            ["u": "alice", "e": 0, "p": ["u:alice": "1"]],
            ["u": "alice", "e": -1, "p": ["u:alice": 1]],
            ["u": "alice", "e": 0, "p": ["h:h1": 1]],
            ["u": "alice", "e": 0, "p": ["u:alice": 1], "f": ["u:alice": -1]],
            ["u": "alice", "e": 0, "p": ["u:alice": 1], "f": ["x": 1]],
            ["u": "alice", "e": 0, "p": ["u:alice": 1], "f": [1]],
            ["u": "alice", "p": ["u:alice": 1]],
            ["u": 5, "e": 0, "p": [:]],
            [1, 2, 3],
        ]
        for payload in payloads {
            #expect(throws: CursorError.self, "\(payload)") { try SyncCursor.decode(forge(payload), expectedUserID: "alice") }
        }
        #expect(throws: Never.self) { try SyncCursor.decode(forge(["u": "alice", "e": 0, "p": ["u:alice": 1]]), expectedUserID: "alice") }
    }

    @Test func rejectsOversizeCursorsBeforeDecoding() {
        let huge = "v1." + String(repeating: "A", count: SyncCursor.maximumEncodedLength) + ".0"
        #expect(throws: CursorError.malformed("cursor is too long")) { try SyncCursor.decode(huge, expectedUserID: "a") }
    }

    @Test func base64URLRoundTripsEveryLength() {
        for length in 0..<70 {
            let bytes = (0..<length).map { UInt8(($0 * 37 + length) % 256) }
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        }
        #expect(Base64URL.decode("A") == nil)
        #expect(Base64URL.decode("AQ") == [1])
        #expect(Base64URL.decode("AB") == nil)  // non-zero padding bits: not canonical
        #expect(Base64URL.decode("A+") == nil)
        #expect(Base64URL.decode("AB==") == nil)
    }

    /// The page after one that answered a cursor: the same query but its cursor.
    @Test func aContinuingQueryKeepsAllButTheCursor() {
        let query = PullQuery(userID: "alice:ü/1", deviceID: "d1", cursor: nil, limit: 7, entityTypes: ["foods", "meals"])
        let next = query.continuing(at: cursor)
        #expect(next.cursor == cursor)
        var expected = query
        expected.cursor = cursor
        #expect(next == expected)
        #expect(next.continuing(at: cursor) == next)
    }
}
