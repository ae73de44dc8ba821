import Testing

@testable import SyncGateCore
import SyncGateWire

@Suite(.timeLimit(.minutes(10))) struct PushRequestTests {
    let now = Timestamp(rfc3339: "2026-01-15T10:00:00.000Z")!

    func parse(_ body: String, limits: PushLimits = .init()) throws(ProtocolError) -> PushRequest {
        try PushRequest(body: Array(body.utf8), limits: limits, receivedAt: now)
    }

    @Test func parsesTheProtocolExample() throws {
        let request = try parse(
            #"""
            {"operations": [{"idempotency_key": "01HZX3M8W7T2Q9", "entity_type": "foodLogs", "entity_id": "fl_1",
              "intent": "create", "base_version": 0, "data": {"loggedDate": "2026-01-15", "mealType": "lunch", "items": []},
              "client_timestamp": "2026-01-15T10:00:00.123Z", "household_id": null}]}
            """#
        )
        let operation = try #require(request.operations.first)
        #expect(operation.idempotencyKey == "01HZX3M8W7T2Q9")
        #expect(operation.intent == .create)
        #expect(operation.data?["mealType"] == "lunch")
        #expect(operation.clientTimestamp.rfc3339 == "2026-01-15T10:00:00.123Z")
        #expect(operation.householdID == nil)
    }

    @Test func defaultsOptionalFields() throws {
        let request = try parse(#"{"operations":[{"idempotency_key":"k","entity_type":"t","entity_id":"e","intent":"delete"}]}"#)
        let operation = try #require(request.operations.first)
        #expect(operation.baseVersion == 0)
        #expect(operation.clientTimestamp == now)
        #expect(operation.data == nil)
    }

    @Test func deleteIgnoresData() throws {
        let request = try parse(#"{"operations":[{"idempotency_key":"k","entity_type":"t","entity_id":"e","intent":"delete","data":{"x":1}}]}"#)
        #expect(request.operations.first?.data == nil)
    }

    static let operation = #""idempotency_key":"k","entity_type":"t","entity_id":"e""#

    @Test(arguments: [
        ("not json", "malformed JSON"),
        ("[]", "the body must be a JSON object"),
        ("{}", "missing field 'operations'"),
        (#"{"operations":{}}"#, "field 'operations' must be an array"),
        (#"{"operations":[]}"#, "field 'operations' must not be empty"),
        (#"{"operations":[1]}"#, "operations[0] must be an object"),
        (#"{"operations":[{"entity_type":"t","entity_id":"e","intent":"create","data":{}}]}"#, "operations[0].idempotency_key is required"),
        (#"{"operations":[{"idempotency_key":7,"entity_type":"t","entity_id":"e","intent":"create","data":{}}]}"#, "operations[0].idempotency_key must be a string"),
        (#"{"operations":[{"idempotency_key":"","entity_type":"t","entity_id":"e","intent":"create","data":{}}]}"#, "operations[0].idempotency_key must be 1 to 128 characters"),
        (#"{"operations":[{"idempotency_key":"k","entity_id":"e","intent":"create","data":{}}]}"#, "operations[0].entity_type is required"),
        (#"{"operations":[{"idempotency_key":"k","entity_type":"t","intent":"create","data":{}}]}"#, "operations[0].entity_id is required"),
        (#"{"operations":[{\#(operation)}]}"#, "operations[0].intent is required"),
        (#"{"operations":[{\#(operation),"intent":"upsert"}]}"#, "operations[0].intent must be one of create, update, delete"),
        (#"{"operations":[{\#(operation),"intent":"create"}]}"#, "operations[0].data is required for create"),
        (#"{"operations":[{\#(operation),"intent":"update","data":null}]}"#, "operations[0].data is required for update"),
        (#"{"operations":[{\#(operation),"intent":"create","data":[1]}]}"#, "operations[0].data must be an object"),
        (#"{"operations":[{\#(operation),"intent":"create","data":{},"base_version":-1}]}"#, "operations[0].base_version must be a non-negative integer"),
        (#"{"operations":[{\#(operation),"intent":"create","data":{},"base_version":1.5}]}"#, "operations[0].base_version must be a non-negative integer"),
        (#"{"operations":[{\#(operation),"intent":"create","data":{},"base_version":"1"}]}"#, "operations[0].base_version must be a non-negative integer"),
        (#"{"operations":[{\#(operation),"intent":"create","data":{},"client_timestamp":"yesterday"}]}"#, "operations[0].client_timestamp must be an RFC 3339 timestamp"),
        (#"{"operations":[{\#(operation),"intent":"create","data":{},"client_timestamp":5}]}"#, "operations[0].client_timestamp must be an RFC 3339 timestamp"),
        (#"{"operations":[{\#(operation),"intent":"create","data":{},"household_id":5}]}"#, "operations[0].household_id must be a string"),
        (#"{"operations":[{\#(operation),"intent":"create","data":{},"household_id":""}]}"#, "operations[0].household_id must be 1 to 128 characters"),
        (#"{"operations":[{"idempotency_key":"k\u0000","entity_type":"t","entity_id":"e","intent":"create","data":{}}]}"#, "operations[0].idempotency_key must not contain control characters"),
    ])
    func rejectsBadShapesWithAClearMessage(_ body: String, _ message: String) {
        let error = #expect(throws: ProtocolError.self) { try parse(body) }
        #expect(error?.code == .validationError)
        #expect(error?.message.hasPrefix(message) == true, "\(error?.message ?? "")")
    }

    @Test func enforcesTheOperationLimit() {
        let one = #"{"idempotency_key":"k","entity_type":"t","entity_id":"e","intent":"delete"}"#
        let body = #"{"operations":["# + Array(repeating: one, count: 4).joined(separator: ",") + "]}"
        #expect(throws: Never.self) { try parse(body, limits: .init(maximumOperations: 4)) }
        let error = #expect(throws: ProtocolError.self) { try parse(body, limits: .init(maximumOperations: 3)) }
        #expect(error?.message == "too many operations: 4 (at most 3 per push)")
    }

    @Test func enforcesTheDataSizeLimit() {
        let big = String(repeating: "x", count: 300)
        let body = #"{"operations":[{\#(Self.operation),"intent":"create","data":{"a":"\#(big)"}}]}"#
        #expect(throws: Never.self) { try parse(body, limits: .init(maximumDataBytes: 400)) }
        let error = #expect(throws: ProtocolError.self) { try parse(body, limits: .init(maximumDataBytes: 200)) }
        #expect(error?.message == "operations[0].data is 308 bytes (at most 200)")
    }

    @Test func enforcesTheDataDepthLimit() {
        func body(depth: Int) -> String {
            let nested = String(repeating: #"{"a":"#, count: depth - 1) + "{}" + String(repeating: "}", count: depth - 1)
            return #"{"operations":[{\#(Self.operation),"intent":"create","data":\#(nested)}]}"#
        }
        #expect(throws: Never.self) { try parse(body(depth: 32)) }
        let error = #expect(throws: ProtocolError.self) { try parse(body(depth: 33)) }
        #expect(error?.message == "data nests deeper than 32 levels")
        let hostile = String(repeating: "[", count: 200_000)
        #expect(throws: ProtocolError.self) { try parse(hostile) }
    }

    @Test(arguments: [("dev-1", true), ("a.b_c:d-E9", true), ("", false), ("has space", false), ("ü", false), (String(repeating: "a", count: 128), true), (String(repeating: "a", count: 129), false)])
    func validatesDeviceIDs(_ id: String, _ valid: Bool) {
        #expect(IdentifierLimits.isValidDeviceID(id) == valid)
    }

    /// The direct comparison agrees with the Unicode tables on every scalar.
    @Test func controlCharactersAreExactlyCategoryCc() {
        var checked = 0
        var disagreements: [String] = []
        for value in UInt32(0)...0x10FFFF {
            guard let scalar = Unicode.Scalar(value) else { continue }   // surrogates
            if IdentifierLimits.isControl(scalar) != (scalar.properties.generalCategory == .control) {
                disagreements.append("U+" + String(value, radix: 16))
            }
            checked += 1
        }
        #expect(checked == 0x110000 - 0x800)
        #expect(disagreements.isEmpty)
    }

    /// Measuring by bytes where that decides agrees with counting code points (not graphemes:
    /// a letter with 50,000 combining marks is one grapheme of 100,001 bytes).
    @Test func lengthsAgreeWithCodePointCounts() {
        let values = ["", "a", "ab", "abc", "é", "e\u{301}", "e\u{301}\u{302}", "👩‍👩‍👧", "日本語", "a👩‍👩‍👧b", "\r\n", String(repeating: "x", count: 128),
                      String(repeating: "x", count: 129), String(repeating: "é", count: 70), String(repeating: "e\u{301}", count: 128), String(repeating: "👍", count: 40),
                      String(repeating: "👍", count: 128), String(repeating: "👍", count: 129), "e" + String(repeating: "\u{301}", count: 50_000)]
        for value in values {
            for range in [0...0, 1...1, 1...2, 1...3, 2...3, 0...128, 1...128, 1...129, 3...300, 1...512] {
                #expect(IdentifierLimits.hasLength(value, in: range) == range.contains(value.unicodeScalars.count), "\(value.prefix(8).debugDescription) in \(range)")
            }
        }
    }
}
