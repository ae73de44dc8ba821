import Testing

@testable import SyncGateCore
import SyncGateWire

/// A pull page writes each change straight to bytes, its document as stored: what it writes
/// must read back as the change's JSON shape (`PulledChange.json`), for every kind of change.
@Suite(.timeLimit(.minutes(10))) struct FeedChangeWriteTests {
    static let at = Timestamp(rfc3339: "2026-01-15T10:00:00.123Z")!

    static let changes: [FeedChange] = [
        FeedChange(scope: .user("alice"), sequence: 1, entityType: "contacts", entityID: "c1", version: 1, data: ["name": "Ann", "n": 1.5], updatedAt: at),
        FeedChange(scope: .household("home"), sequence: 2, entityType: "inventory", entityID: "i \"quoted\"\n", version: 7, data: ["q": 5, "nested": ["a": [1, nil, true]]], updatedAt: at),
        FeedChange(scope: .household("h\u{2028}x"), sequence: 3, entityType: "inventory", entityID: "gone", version: 9, data: nil, updatedAt: at),
        FeedChange(scope: .user("bob"), sequence: 4, entityType: "weights", entityID: "w", version: 2, data: [:], updatedAt: at),
        // A service key's changes carry their origin, an upsert and a delete.
        FeedChange(scope: .household("home"), sequence: 6, entityType: "inventory", entityID: "milk", version: 2, data: ["q": 1], updatedAt: at, origin: "service:dash\"board"),
        FeedChange(scope: .user("dan"), sequence: 7, entityType: "notes", entityID: "x", version: 4, data: nil, updatedAt: at, origin: "service:billing"),
        FeedChange(
            scope: .user("carl"), sequence: 5, entityType: "notes", entityID: "n", version: 3,
            document: try! DocumentText(checking: Array(#"{"text": "a, b", "kg": 57.0, "big": 1e300}"#.utf8), parser: JSONParser(maximumDepth: 64)),
            updatedAt: at
        ),
    ]

    @Test(arguments: changes)
    func aWrittenChangeReadsBackAsItsJSON(_ change: FeedChange) throws {
        var bytes: [UInt8] = []
        change.write(to: &bytes)
        #expect(try JSONParser().parse(bytes) == change.pulled.json)
        // The wire type reads the origin back; a device's change has no `origin` member at all.
        #expect(try PulledChange(json: JSONParser().parse(bytes)).origin == change.origin)
        #expect(change.origin != nil || !String(decoding: bytes, as: UTF8.self).contains("origin"))
        if change.document == nil || change.document == DocumentText(change.data ?? [:]) && change.sequence != 5 {
            // Written from an object, the bytes are the tree's own serialization.
            #expect(bytes == change.pulled.json.serializedBytes())
        }
    }
}
