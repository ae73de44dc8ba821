import Testing

@testable import SyncGateCore
import SyncGateWire

/// The storage format of queued jobs: versioned, readable across releases, and refusing what it
/// cannot read with a message instead of guessing.
@Suite(.timeLimit(.minutes(10))) struct JobCodecTests {
    static let operations: [SyncOperation] = [
        SyncOperation(
            idempotencyKey: "k1", entityType: "inventory", entityID: "i", intent: .update, baseVersion: 3,
            data: ["q": nil, "n": 2, "nested": ["deep": [1, 2.5, "x", true]]], clientTimestamp: Fixture.at(-5), householdID: "h1"
        ),
        SyncOperation(idempotencyKey: "k2", entityType: "t", entityID: "e", intent: .delete, baseVersion: 1, clientTimestamp: Fixture.now),
        SyncOperation(idempotencyKey: "k3", entityType: "notes", entityID: "n", intent: .create, data: [:], clientTimestamp: Fixture.at(7)),
    ]

    @Test func version2RoundTrips() throws {
        let text = JobCodec.encode(Self.operations)
        #expect(text.hasPrefix(#"{"ops":"#) && text.contains(#""v":2"#))
        #expect(try JobCodec.decode(text) == Self.operations)
    }

    /// Jobs queued by a release before version 2 stored the wire form; they still run.
    @Test func version1PayloadsStillDecode() throws {
        let legacy = JSONValue.array(Self.operations.map(\.json)).serialized()
        #expect(try JobCodec.decode(legacy) == Self.operations)
    }

    @Test(arguments: [
        ("garbage{", "not JSON"),
        (#"{"ops":[]}"#, "no format version"),
        (#"{"v":3,"ops":[]}"#, "format version 3"),
        (#"{"v":2}"#, "no operations"),
        (#"{"v":2,"ops":[1]}"#, "operation 0 is not an object"),
        (#"{"v":2,"ops":[{"k":"a","t":"t","i":"i","n":"x","b":0,"ts":0}]}"#, "unknown intent 'x'"),
        (#"{"v":2,"ops":[{"k":"a","t":"t","i":"i","n":"c","b":0,"ts":0}]}"#, "'d' must be an object"),
        (#"{"v":2,"ops":[{"k":"a","t":"t","i":"i","n":"d","b":"0","ts":0}]}"#, "'b' must be an integer"),
        (#"[{"idempotency_key":"a","entity_type":"t","entity_id":"i","intent":"delete","base_version":0,"client_timestamp":"nope"}]"#, "not a timestamp"),
    ])
    func undecodablePayloadsSayWhy(_ payload: String, _ reason: String) {
        #expect {
            try JobCodec.decode(payload)
        } throws: { error in
            (error as? JobPayloadError)?.message.contains(reason) == true
        }
    }

    @Test func undecodableResultsAreAnErrorNotAnEmptyList() {
        #expect(throws: JobPayloadError.self) { try JobCodec.decodeResults("[{\"status\":\"applied\"}]") }
        #expect(throws: JobPayloadError.self) { try JobCodec.decodeResults("{}") }
        #expect((try? JobCodec.decodeResults("[]")) == [])
    }

    /// A payload that cannot be read is permanent: the job dies at once instead of retrying.
    @Test func payloadErrorsArePermanent() {
        let error: any Error = JobPayloadError("x")
        #expect(error is any PermanentFailure)
        let settlement = RetryPolicy(maximumAttempts: 5).settle(operations: [], afterAttempts: 1, permanent: true, jitter: 0)
        #expect(settlement == .dead(results: []))
    }
}
