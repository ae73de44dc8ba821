import Testing

@testable import SyncGateCore
import SyncGateWire

/// What no driver can store is refused per operation, in the decision both drivers share.
@Suite(.timeLimit(.minutes(10))) struct StorableDocumentTests {
    static let cases: [(JSONObject, String)] = [
        (["name": "a\u{0}b"], "field 'name'"),
        (["deep": ["list": [1, ["x": "\u{0}"]]]], "field 'deep.list[1].x'"),
        (["a\u{0}": 1], "a field name"),
        (["nested": ["k\u{0}ey": true]], "a field name in 'nested'"),
    ]

    @Test(arguments: cases)
    func nulAnywhereIsRefusedNamingWhere(_ document: JSONObject, _ where_: String) {
        let reason = StorableDocument.violation(in: document)
        #expect(reason?.contains(where_) == true, "\(reason ?? "accepted")")
        #expect(reason?.contains("U+0000") == true)
    }

    @Test func ordinaryDocumentsPass() {
        #expect(StorableDocument.violation(in: ["a": "\u{1}\u{7F}é😀", "b": [nil, 1.5, ["c": false]], "\u{FFFF}": "x"]) == nil)
    }

    @Test func oneUnstorableOperationDoesNotFailItsNeighbours() {
        let applier = BatchApplier(userID: "alice", collections: .default, now: Fixture.now)
        let outcome = applier.apply(
            [
                SyncOperation(idempotencyKey: "1", entityType: "contacts", entityID: "a", intent: .create, data: ["n": "ok"], clientTimestamp: Fixture.now),
                SyncOperation(idempotencyKey: "2", entityType: "contacts", entityID: "b", intent: .create, data: ["n": "bad\u{0}"], clientTimestamp: Fixture.now),
                SyncOperation(idempotencyKey: "3", entityType: "contacts", entityID: "a", intent: .update, baseVersion: 1, data: ["m": "\u{0}"], clientTimestamp: Fixture.now),
                SyncOperation(idempotencyKey: "4", entityType: "contacts", entityID: "c", intent: .create, data: ["n": "ok"], clientTimestamp: Fixture.now),
            ],
            snapshot: .init()
        )
        #expect(outcome.results.map { $0.status.errorCode ?? "ok" } == ["ok", "VALIDATION_ERROR", "VALIDATION_ERROR", "ok"])
        #expect(outcome.writes.map(\.key.entityID) == ["a", "c"])
        #expect(outcome.recorded.map(\.key) == ["1", "4"])
    }
}

extension OperationResult.Status {
    var errorCode: String? {
        if case .rejected(let code, _, _) = self { return code }
        return nil
    }
}
