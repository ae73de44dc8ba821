import Testing

@testable import SyncGateClient

@Suite("Applying pulled changes", .timeLimit(.minutes(10)))
struct ReplicaPullTests {
    @Test("a change applies only when its version is higher, or the entity is absent")
    func versions() {
        var slice = ReplicaSlice()
        slice.apply([PulledChange(key: .milk, data: ["q": 1], version: 4)])
        #expect(slice.server[.milk] == ServerRecord(version: 4, data: ["q": 1]))
        slice.apply([PulledChange(key: .milk, data: ["q": 0], version: 3), PulledChange(key: .milk, data: ["q": 9], version: 4)])
        #expect(slice.server[.milk] == ServerRecord(version: 4, data: ["q": 1]))
        slice.apply([PulledChange(key: .milk, data: ["q": 5], version: 5)])
        #expect(slice.server[.milk]?.data == ["q": 5])
    }

    @Test("a delete removes the entity unless the local one is newer; of an absent entity it does nothing")
    func deletes() {
        var slice = ReplicaSlice(server: [.milk: ServerRecord(version: 5, data: ["q": 5])])
        slice.apply([PulledChange(key: .milk, data: nil, version: 5)])
        #expect(slice.server[.milk] != nil)
        slice.apply([PulledChange(key: .milk, data: nil, version: 6), PulledChange(key: .eggs, data: nil, version: 2)])
        #expect(slice.server.isEmpty)
    }

    @Test("applying a page twice is applying it once")
    func idempotent() {
        let page = [
            PulledChange(key: .milk, data: ["q": 1], version: 1), PulledChange(key: .eggs, data: ["q": 2], version: 3),
            PulledChange(key: .milk, data: ["q": 3], version: 2), PulledChange(key: .eggs, data: nil, version: 4),
        ]
        var once = ReplicaSlice()
        once.apply(page)
        var twice = once
        twice.apply(page)
        #expect(once == twice)
        #expect(once.server == [.milk: ServerRecord(version: 2, data: ["q": 3])])
    }

    @Test("during a resync a stale record takes whatever the feed says, even an older version (ids reused after a purge)")
    func staleRecords() {
        var slice = ReplicaSlice(server: [.milk: ServerRecord(version: 9, data: ["q": 9], stale: true), .eggs: ServerRecord(version: 3, data: ["q": 3], stale: true)])
        slice.apply([PulledChange(key: .milk, data: ["q": 1], version: 1), PulledChange(key: .eggs, data: nil, version: 1)])
        #expect(slice.server == [.milk: ServerRecord(version: 1, data: ["q": 1])])
        // Once fresh, the usual rule holds again.
        slice.apply([PulledChange(key: .milk, data: ["q": 0], version: 1)])
        #expect(slice.server[.milk]?.data == ["q": 1])
    }

    @Test("an acknowledged write leaves the view once a pulled version reaches its own, not before")
    func acknowledgedWrites() throws {
        let keys = KeyMaker()
        var slice = ReplicaSlice(server: [.milk: ServerRecord(version: 2, data: ["q": 2])])
        try record(.patch(["q": 3]), on: .milk, in: &slice, keys: keys)
        markSent(["k1"], in: &slice)
        _ = slice.settle(batch: ["k1"], results: [result("k1", .milk, .applied, version: 4)], pullEpoch: 1)
        slice.apply([PulledChange(key: .milk, data: ["q": 2, "other": true], version: 3)])
        #expect(slice.view(of: .milk).data == ["q": 3, "other": true])
        #expect(slice.outbox.count == 1)
        slice.apply([PulledChange(key: .milk, data: ["q": 3, "other": true], version: 4)])
        #expect(slice.outbox.isEmpty)
        #expect(slice.view(of: .milk) == .init(data: ["q": 3, "other": true], version: 4, hasPendingWrites: false))
    }

    @Test("pending writes stay on top of pulled changes")
    func pendingOnTop() throws {
        var slice = ReplicaSlice(server: [.milk: ServerRecord(version: 2, data: ["q": 2, "unit": "l"])])
        try record(.patch(["q": 7]), on: .milk, in: &slice, keys: KeyMaker())
        slice.apply([PulledChange(key: .milk, data: ["q": 5, "unit": "ml"], version: 3)])
        #expect(slice.view(of: .milk).data == ["q": 7, "unit": "ml"])
        #expect(slice.outbox.first?.baseVersion == 2)
        slice.apply([PulledChange(key: .milk, data: nil, version: 4)])
        #expect(slice.view(of: .milk).data == nil)
    }

    @Test("a completed pull drops the acknowledgements from before it began whose jobs its watermark counts")
    func epochs() {
        let acknowledged = { (key: String, epoch: Int64, job: Int64?) in
            OutboxEntry(sequence: Int64(epoch), idempotencyKey: key, key: .milk, intent: .update, data: ["q": 1], baseVersion: 1, followsPending: false, clientTimestamp: 0, state: .acknowledged(version: 9, epoch: epoch, jobID: job))
        }
        let outbox = [acknowledged("old", 3, 20), acknowledged("legacy", 3, nil), acknowledged("lagging", 3, 21), acknowledged("new", 4, 19)]
        var slice = ReplicaSlice(outbox: outbox)
        slice.dropAcknowledged(before: 4, watermark: 20)
        #expect(slice.outbox.map(\.idempotencyKey) == ["lagging", "new"])
        slice = ReplicaSlice(outbox: outbox)
        slice.dropAcknowledged(before: 5, watermark: 0)
        #expect(slice.outbox.map(\.idempotencyKey) == ["old", "lagging", "new"])
    }
}
