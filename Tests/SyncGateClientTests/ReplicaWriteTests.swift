import Testing

@testable import SyncGateClient

@Suite("Recording local writes", .timeLimit(.minutes(10)))
struct ReplicaWriteTests {
    @Test("a put on an absent entity creates it at base version 0 with the whole document")
    func putCreates() throws {
        var slice = ReplicaSlice()
        let effect = try record(.put(["name": "Milk", "quantity": 2]), on: .milk, in: &slice, keys: KeyMaker())
        #expect(effect == .appended(idempotencyKey: "k1"))
        let entry = try #require(slice.outbox.first)
        #expect(entry.intent == .create)
        #expect(entry.baseVersion == 0)
        #expect(entry.data == ["name": "Milk", "quantity": 2])
        #expect(entry.state == .pending)
        #expect(!entry.followsPending)
        #expect(slice.view(of: .milk) == .init(data: ["name": "Milk", "quantity": 2], version: nil, hasPendingWrites: true))
    }

    @Test("a put on a present entity updates the fields that differ, null for removed ones, on the server's version")
    func putUpdates() throws {
        var slice = ReplicaSlice(server: [.milk: ServerRecord(version: 3, data: ["name": "Milk", "quantity": 2, "note": "x"])])
        try record(.put(["name": "Milk", "quantity": 1, "unit": "l"]), on: .milk, in: &slice, keys: KeyMaker())
        let entry = try #require(slice.outbox.first)
        #expect(entry.intent == .update)
        #expect(entry.baseVersion == 3)
        #expect(entry.data == ["quantity": 1, "unit": "l", "note": nil])
        #expect(slice.view(of: .milk).data == ["name": "Milk", "quantity": 1, "unit": "l"])
        #expect(slice.view(of: .milk).version == 3)
    }

    @Test("writes that change nothing are not recorded")
    func unchanged() throws {
        var slice = ReplicaSlice(server: [.milk: ServerRecord(version: 3, data: ["name": "Milk"])])
        let keys = KeyMaker()
        #expect(try record(.put(["name": "Milk"]), on: .milk, in: &slice, keys: keys) == .unchanged)
        #expect(try record(.patch(["name": "Milk", "gone": nil]), on: .milk, in: &slice, keys: keys) == .unchanged)
        #expect(try record(.delete, on: .eggs, in: &slice, keys: keys) == .unchanged)
        #expect(slice.outbox.isEmpty)
    }

    @Test("a string rewritten in another Unicode form is a change: the server stores bytes")
    func anotherUnicodeFormIsAChange() throws {
        var slice = ReplicaSlice(server: [.milk: ServerRecord(version: 3, data: ["name": "Caf\u{E9}"])])
        let keys = KeyMaker()
        #expect(try record(.patch(["name": "Cafe\u{301}"]), on: .milk, in: &slice, keys: keys) == .appended(idempotencyKey: "k1"))
        let sent = slice.outbox.first?.data?["name"]?.stringValue.map { Array($0.utf8) }
        #expect(sent == Array("Cafe\u{301}".utf8))
        // And back: the pending write now says the NFC bytes again.
        #expect(try record(.put(["name": "Caf\u{E9}"]), on: .milk, in: &slice, keys: keys) != .unchanged)
        #expect(slice.view(of: .milk).data?["name"] == "Caf\u{E9}")
    }

    @Test("a patch sends only the fields that change; of an absent entity it is an error")
    func patch() throws {
        var slice = ReplicaSlice(server: [.milk: ServerRecord(version: 2, data: ["name": "Milk", "quantity": 2])])
        try record(.patch(["name": "Milk", "quantity": 5, "unit": nil]), on: .milk, in: &slice, keys: KeyMaker())
        #expect(slice.outbox.first?.data == ["quantity": 5])
        #expect(throws: LocalChangeError.notFound) { try record(.patch(["a": 1]), on: .eggs, in: &slice, keys: KeyMaker()) }
    }

    @Test("a delete of a present entity is a delete on the server's version")
    func delete() throws {
        var slice = ReplicaSlice(server: [.milk: ServerRecord(version: 7, data: ["name": "Milk"])])
        try record(.delete, on: .milk, in: &slice, keys: KeyMaker())
        #expect(slice.outbox.first?.intent == .delete)
        #expect(slice.outbox.first?.baseVersion == 7)
        #expect(slice.outbox.first?.data == nil)
        #expect(slice.view(of: .milk).data == nil)
    }

    @Test("unsent writes of one entity merge into one entry that carries the later timestamp")
    func coalescing() throws {
        let keys = KeyMaker()
        var slice = ReplicaSlice(server: [.weight: ServerRecord(version: 4, data: ["kg": 70, "note": "a"])])
        try record(.patch(["kg": 71]), on: .weight, in: &slice, keys: keys, at: 1)
        #expect(try record(.patch(["note": nil, "kg": 72]), on: .weight, in: &slice, keys: keys, at: 2) == .merged(idempotencyKey: "k1"))
        #expect(slice.outbox.count == 1)
        #expect(slice.outbox[0].data == ["kg": 72, "note": nil])
        #expect(slice.outbox[0].clientTimestamp == 2)
        #expect(slice.outbox[0].baseVersion == 4)
        #expect(try record(.delete, on: .weight, in: &slice, keys: keys, at: 3) == .merged(idempotencyKey: "k1"))
        #expect(slice.outbox[0].intent == .delete)
        #expect(slice.outbox[0].data == nil)
        #expect(slice.outbox[0].clientTimestamp == 3)
        #expect(slice.view(of: .weight).data == nil)
    }

    @Test("create then update is one create of the final document; create then delete is nothing")
    func createCoalescing() throws {
        let keys = KeyMaker()
        var slice = ReplicaSlice()
        try record(.put(["name": "Eggs", "quantity": 12]), on: .eggs, in: &slice, keys: keys)
        try record(.put(["name": "Eggs", "quantity": 10, "unit": "pcs"]), on: .eggs, in: &slice, keys: keys)
        try record(.patch(["unit": nil]), on: .eggs, in: &slice, keys: keys)
        #expect(slice.outbox.count == 1)
        #expect(slice.outbox[0].intent == .create)
        #expect(slice.outbox[0].data == ["name": "Eggs", "quantity": 10])
        #expect(try record(.delete, on: .eggs, in: &slice, keys: keys) == .cancelled(idempotencyKey: "k1"))
        #expect(slice.outbox.isEmpty)
        #expect(slice.view(of: .eggs) == .init(data: nil, version: nil, hasPendingWrites: false))
    }

    @Test("a write over a sent entry waits for its result; it is not merged into what the server may be applying")
    func followsSent() throws {
        let keys = KeyMaker()
        var slice = ReplicaSlice(server: [.milk: ServerRecord(version: 2, data: ["quantity": 2])])
        try record(.patch(["quantity": 3]), on: .milk, in: &slice, keys: keys)
        markSent(["k1"], in: &slice)
        #expect(try record(.patch(["quantity": 4]), on: .milk, in: &slice, keys: keys) == .appended(idempotencyKey: "k2"))
        #expect(slice.outbox.map(\.followsPending) == [false, true])
        #expect(slice.outbox[1].baseVersion == 2)
        #expect(slice.outbox[1].data == ["quantity": 4])
        #expect(slice.view(of: .milk).data == ["quantity": 4])
    }

    @Test("a delete does not merge a later create: the create follows it")
    func deleteThenCreate() throws {
        let keys = KeyMaker()
        var slice = ReplicaSlice(server: [.milk: ServerRecord(version: 2, data: ["quantity": 2])])
        try record(.delete, on: .milk, in: &slice, keys: keys)
        try record(.put(["quantity": 9]), on: .milk, in: &slice, keys: keys)
        #expect(slice.outbox.map(\.intent) == [.delete, .create])
        #expect(slice.outbox.map(\.followsPending) == [false, true])
        #expect(slice.view(of: .milk).data == ["quantity": 9])
    }

    @Test("a write over an acknowledged write is based on the version that write reached")
    func overAcknowledged() throws {
        let keys = KeyMaker()
        var slice = ReplicaSlice(server: [.milk: ServerRecord(version: 2, data: ["quantity": 2])])
        try record(.patch(["quantity": 3]), on: .milk, in: &slice, keys: keys)
        markSent(["k1"], in: &slice)
        _ = slice.settle(batch: ["k1"], results: [result("k1", .milk, .applied, version: 3)], pullEpoch: 1)
        try record(.patch(["quantity": 4]), on: .milk, in: &slice, keys: keys)
        #expect(slice.outbox[1].baseVersion == 3)
        #expect(!slice.outbox[1].followsPending)
        // Once the server record has moved past it, the acknowledgement no longer counts.
        slice.apply([PulledChange(key: .milk, data: ["quantity": 8, "unit": "l"], version: 5)])
        #expect(slice.outbox.map(\.idempotencyKey) == ["k2"])
        #expect(slice.view(of: .milk).data == ["quantity": 4, "unit": "l"])
    }
}
