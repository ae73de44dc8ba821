import Foundation
import Testing

@testable import SyncGateClient

@Suite("Local store on SQLite", .timeLimit(.minutes(10)))
struct LocalStoreTests {
    let path: String
    let store: LocalStore
    let counter = KeyMaker()

    init() throws {
        path = try temporaryFolder("store") + "/device.sqlite"
        store = try LocalStore(path: path)
    }

    func write(_ change: LocalChange, _ key: EntityKey, at time: Int64 = 1) async throws -> WriteEffect {
        let counter = self.counter
        return try await store.record(change, on: key, at: time, newKey: { counter.next() })
    }

    func page(_ changes: [PulledChange], cursor: String = "c", hasMore: Bool = false, added: [String] = [], removed: [String] = [], watermark: Int64 = 5) -> PullPage {
        PullPage(changes: changes, envelope: .init(cursor: cursor, hasMore: hasMore, scopesAdded: added, scopesRemoved: removed, deviceWatermark: watermark))
    }

    @Test("writes show in reads at once and survive reopening the file, outbox and all")
    func persistence() async throws {
        try await _ = write(.put(["name": "Milk", "quantity": 2]), .milk)
        try await _ = write(.put(["kg": 70.5]), .weight)
        #expect(try await store.entities(.init(entityType: "inventory")).map(\.data) == [["name": "Milk", "quantity": 2]])
        let reopened = try LocalStore(path: path)
        #expect(try await reopened.entities(.init()).map(\.key) == [.milk, .weight])
        #expect(try await reopened.entity(.weight)?.data == ["kg": 70.5])
        #expect(try await reopened.entity(.weight)?.hasPendingWrites == true)
        #expect(try await reopened.outbox().map(\.idempotencyKey) == ["k1", "k2"])
        #expect(try await reopened.outbox() == (try await store.outbox()))
    }

    @Test("reads filter by type and household")
    func selections() async throws {
        try await _ = write(.put(["q": 1]), .milk)
        try await _ = write(.put(["q": 2]), EntityKey(entityType: "inventory", entityID: "milk", householdID: "cabin"))
        try await _ = write(.put(["kg": 1]), .weight)
        #expect(try await store.entities(.init(entityType: "inventory", household: .some("cabin"))).map(\.data) == [["q": 2]])
        #expect(try await store.entities(.init(entityType: nil, household: .some(nil))).map(\.key) == [.weight])
        #expect(try await store.entities(.init(entityType: "inventory")).count == 2)
    }

    @Test("a batch is marked sent in the same transaction: a later write follows it instead of merging")
    func batches() async throws {
        try await _ = write(.put(["q": 1]), .milk)
        guard case .push(let batch) = try await store.nextBatch(limits: .init(operations: 10, bytes: 1 << 20)) else { Issue.record(); return }
        #expect(batch.map(\.state) == [.sent(jobID: nil)])
        #expect(try await write(.patch(["q": 2]), .milk) == .appended(idempotencyKey: "k2"))
        #expect(try await store.outbox().map(\.followsPending) == [false, true])
        try await store.recordJob("77", for: ["k1"])
        #expect(try await store.nextBatch(limits: .init(operations: 10, bytes: 1 << 20)) == .follow(jobID: "77"))
        #expect(try await store.entries(ofJob: "77") == ["k1"])
        try await store.forgetJob("77")
        #expect(try await store.outbox().first?.state == .sent(jobID: nil))
    }

    @Test("a pulled delete holds against a later answer about an older version, across transactions and reopening")
    func pulledDeleteHolds() async throws {
        let pull = try await store.beginPull()
        _ = try await store.apply(page([PulledChange(key: .milk, data: ["name": "Milk", "quantity": 2], version: 2)]), epoch: pull.epoch)
        try await _ = write(.patch(["quantity": 3]), .milk)
        _ = try await store.nextBatch(limits: .init(operations: 10, bytes: 1 << 20))
        let next = try await store.beginPull()
        _ = try await store.apply(page([PulledChange(key: .milk, data: nil, version: 4)]), epoch: next.epoch)
        let reopened = try LocalStore(path: path)
        let merged = result("k1", .milk, .conflict(.merged), version: 3, merged: ["name": "Milk", "quantity": 3])
        _ = try await reopened.settle(batch: ["k1"], results: [merged], jobID: 1)
        #expect(try await reopened.entity(.milk) == nil)
        #expect(try await reopened.serverRecords().isEmpty)
        #expect(try await reopened.outbox().isEmpty)
    }

    @Test("a batch read from a long outbox's head is the batch the whole outbox gives")
    func batchesFromTheHead() async throws {
        let keys = (0..<40).map { EntityKey(entityType: "weightLogs", entityID: "w\($0)", householdID: nil) }
        for key in keys { try await _ = write(.put(["kg": 70]), key) }
        func nextMatchesTheWholeOutbox(_ operations: Int) async throws -> OutboxBatcher.Next {
            let limits = OutboxBatcher.Limits(operations: operations, bytes: 1 << 20)
            let expected = OutboxBatcher.next(try await store.outbox(), limits: limits)
            let next = try await store.nextBatch(limits: limits)
            switch (expected, next) {
            case (.push(let whole), .push(let head)): #expect(head.map(\.idempotencyKey) == whole.map(\.idempotencyKey))
            default: #expect(next == expected)
            }
            return next
        }
        guard case .push(let first) = try await nextMatchesTheWholeOutbox(10) else { Issue.record(); return }
        #expect(first.count == 10)
        // Acknowledged entries ahead of the rest are not part of a batch.
        let acknowledged = first.prefix(4).map { result($0.idempotencyKey, $0.key, .applied, version: 1) }
        _ = try await store.settle(batch: first.prefix(4).map(\.idempotencyKey), results: acknowledged, jobID: 1)
        guard case .push(let second) = try await nextMatchesTheWholeOutbox(10) else { Issue.record(); return }
        #expect(second.first?.idempotencyKey == first[4].idempotencyKey)
        // An entry waiting for its job is followed first, wherever it is.
        try await store.recordJob("12", for: [second[3].idempotencyKey])
        #expect(try await nextMatchesTheWholeOutbox(2) == .follow(jobID: "12"))
    }

    @Test("a completed pull whose watermark does not count a write's job keeps the write in view (a lagging standby)")
    func watermark() async throws {
        try await _ = write(.put(["q": 1]), .milk)
        _ = try await store.nextBatch(limits: .init(operations: 1, bytes: 1 << 20))
        _ = try await store.settle(batch: ["k1"], results: [result("k1", .milk, .applied, version: 1)], jobID: 7)
        // Read before job 7 finished there: no change, watermark 6.
        var pull = try await store.beginPull()
        _ = try await store.apply(page([], watermark: 6), epoch: pull.epoch)
        #expect(try await store.outbox().map(\.state) == [.acknowledged(version: 1, epoch: 0, jobID: 7)])
        #expect(try await store.entity(.milk)?.data == ["q": 1])
        // A write on top of it is made on the version the server answered.
        try await _ = write(.patch(["q": 2]), .milk)
        #expect(try await store.outbox().last?.baseVersion == 1)
        // A pull that counts job 7 brings its change; the acknowledgement leaves.
        pull = try await store.beginPull()
        _ = try await store.apply(page([PulledChange(key: .milk, data: ["q": 1], version: 1)], watermark: 7), epoch: pull.epoch)
        #expect(try await store.outbox().map(\.idempotencyKey) == ["k2"])
        #expect(try await store.entity(.milk)?.data == ["q": 2])
    }

    @Test("results settle entries and the view, and release the write that followed")
    func settle() async throws {
        try await _ = write(.put(["q": 1]), .milk)
        _ = try await store.nextBatch(limits: .init(operations: 10, bytes: 1 << 20))
        try await _ = write(.patch(["q": 2]), .milk)
        let settlement = try await store.settle(batch: ["k1"], results: [result("k1", .milk, .applied, version: 1)], jobID: 1)
        #expect(settlement.outcomes.map(\.result) == [.applied(version: 1)])
        let outbox = try await store.outbox()
        #expect(outbox.map(\.state) == [.acknowledged(version: 1, epoch: 0, jobID: 1), .pending])
        #expect(outbox[1].baseVersion == 1)
        #expect(!outbox[1].followsPending)
        #expect(try await store.entity(.milk)?.data == ["q": 2])
    }

    @Test("a page applies changes, cursor and watermark together; households joined and left")
    func pages() async throws {
        let start = try await store.beginPull()
        let cabin = EntityKey(entityType: "inventory", entityID: "wood", householdID: "cabin")
        var effect = try await store.apply(
            page([PulledChange(key: .milk, data: ["q": 1], version: 3), PulledChange(key: cabin, data: ["q": 9], version: 1)], added: ["home", "cabin"]),
            epoch: start.epoch
        )
        #expect(effect.joined == ["cabin", "home"])
        #expect(try await store.households() == ["cabin", "home"])
        #expect(try await store.pullState().cursor == "c")
        #expect(try await store.pullState().deviceWatermark == "5")
        #expect(try await store.entity(.milk) == SyncEntity(key: .milk, data: ["q": 1], version: 3, hasPendingWrites: false))

        // A pending write to the household we are about to leave stays for the server to decide.
        try await _ = write(.patch(["q": 8]), cabin)
        effect = try await store.apply(page([], cursor: "d", removed: ["cabin"]), epoch: start.epoch)
        #expect(effect.left == ["cabin"])
        #expect(try await store.households() == ["home"])
        #expect(try await store.serverRecords().keys.sorted() == [.milk])
        #expect(try await store.outbox().map(\.key) == [cabin])
        #expect(try await store.entity(cabin) == nil)
    }

    /// Seed 1655 of the convergence run: bob's write to the household was in flight, lost its
    /// answer, and bob left; the retried push's answer (server_wins, from before he left)
    /// brought the household's document back after the pull had dropped the household.
    @Test("an answer that arrives after its household was left does not bring the household's data back")
    func answerAfterLeaving() async throws {
        let start = try await store.beginPull()
        _ = try await store.apply(page([PulledChange(key: .eggs, data: ["q": 1], version: 1)], added: ["home"]), epoch: start.epoch)
        try await _ = write(.patch(["q": 2]), .eggs)
        _ = try await store.nextBatch(limits: .init(operations: 10, bytes: 1 << 20))
        _ = try await store.apply(page([], cursor: "d", removed: ["home"]), epoch: start.epoch)
        let settlement = try await store.settle(batch: ["k1"], results: [result("k1", .eggs, .conflict(.serverWins), version: 3, serverData: ["q": 7])], jobID: 1)
        #expect(settlement.outcomes.map(\.result) == [.serverWins(version: 3, data: ["q": 7])])
        #expect(try await store.entity(.eggs) == nil)
        #expect(try await store.serverRecords().isEmpty)
        #expect(try await store.outbox().isEmpty)
    }

    @Test("a resync keeps what the feed brings again, drops the rest at its end, and keeps the outbox")
    func resync() async throws {
        let first = try await store.beginPull()
        _ = try await store.apply(
            page([PulledChange(key: .milk, data: ["q": 5], version: 5), PulledChange(key: .eggs, data: ["q": 12], version: 2)], added: ["home", "old"]),
            epoch: first.epoch
        )
        try await _ = write(.put(["kg": 80]), .weight)
        try await store.beginResync()
        #expect(try await store.pullState() == .init(cursor: nil, resyncing: true, epoch: first.epoch, deviceWatermark: "5"))
        let second = try await store.beginPull()
        // The id was purged and created again: version 1 replaces the stale version 5.
        var effect = try await store.apply(page([PulledChange(key: .milk, data: ["q": 1], version: 1)], cursor: "r1", hasMore: true, added: ["home"]), epoch: second.epoch)
        #expect(!effect.finishedResync)
        #expect(try await store.entity(.eggs) != nil)
        effect = try await store.apply(page([], cursor: "r2"), epoch: second.epoch)
        #expect(effect.finishedResync)
        #expect(effect.left == ["old"])
        #expect(effect.joined.isEmpty)
        #expect(try await store.serverRecords() == [.milk: ServerRecord(version: 1, data: ["q": 1])])
        #expect(try await store.entity(.eggs) == nil)
        #expect(try await store.entity(.weight)?.data == ["kg": 80])
        #expect(try await store.outbox().count == 1)
        #expect(try await store.pullState().resyncing == false)
    }

    /// Seed 737 of the convergence run: a device learned w1 v1 from a push answer before it had
    /// ever pulled, then deleted it (acknowledged at v2); the tombstone was purged and another
    /// device created w1 again, at v1. The first pull brought that v1, which lost to the record
    /// from the answer (same version), and the device kept the old document for good.
    @Test("a first pull is the truth: records learned from push answers before it are replaced or dropped")
    func firstPullAfterAnswers() async throws {
        let other = EntityKey(entityType: "weightLogs", entityID: "w2")
        try await _ = write(.put(["kg": 70]), .weight)
        try await _ = write(.put(["kg": 71]), other)
        _ = try await store.nextBatch(limits: .init(operations: 10, bytes: 1 << 20))
        _ = try await store.settle(
            batch: ["k1", "k2"],
            results: [
                result("k1", .weight, .conflict(.serverWins), version: 1, serverData: ["kg": 60]),
                result("k2", other, .conflict(.serverWins), version: 3, serverData: ["kg": 65]),
            ],
            jobID: 1
        )
        try await _ = write(.delete, .weight)
        _ = try await store.nextBatch(limits: .init(operations: 10, bytes: 1 << 20))
        _ = try await store.settle(batch: ["k3"], results: [result("k3", .weight, .applied, version: 2)], jobID: 1)
        #expect(try await store.entity(.weight) == nil)

        // The server purged both tombstones, and w1 was created again at version 1.
        let start = try await store.beginPull()
        _ = try await store.apply(page([], cursor: "p1", hasMore: true), epoch: start.epoch)
        _ = try await store.apply(page([PulledChange(key: .weight, data: ["kg": 76], version: 1)], cursor: "p2"), epoch: start.epoch)
        #expect(try await store.entity(.weight) == SyncEntity(key: .weight, data: ["kg": 76], version: 1, hasPendingWrites: false))
        #expect(try await store.entity(other) == nil)
        #expect(try await store.serverRecords() == [.weight: ServerRecord(version: 1, data: ["kg": 76])])
        #expect(try await store.outbox().isEmpty)
        #expect(try await store.pullState().resyncing == false)
    }

    @Test("a completed pull drops acknowledgements from before it began, not ones made during it")
    func epochs() async throws {
        try await _ = write(.put(["q": 1]), .milk)
        try await _ = write(.put(["q": 2]), .eggs)
        _ = try await store.nextBatch(limits: .init(operations: 1, bytes: 1 << 20))
        _ = try await store.settle(batch: ["k1"], results: [result("k1", .milk, .applied, version: 1)], jobID: 1)
        let pull = try await store.beginPull()
        _ = try await store.nextBatch(limits: .init(operations: 1, bytes: 1 << 20))
        _ = try await store.settle(batch: ["k2"], results: [result("k2", .eggs, .applied, version: 1)], jobID: 1)
        // The pull read nothing of either write (as if it were read before they committed).
        _ = try await store.apply(page([]), epoch: pull.epoch)
        #expect(try await store.outbox().map(\.idempotencyKey) == ["k2"])
        #expect(try await store.entity(.milk) == nil)
        #expect(try await store.entity(.eggs)?.data == ["q": 2])
    }

    @Test("observation sees local writes and pulled changes")
    func observation() async throws {
        var iterator = store.observe(.init(entityType: "inventory")).makeAsyncIterator()
        #expect(try await iterator.next() == [])
        try await _ = write(.put(["q": 1]), .milk)
        #expect(try await iterator.next()?.map(\.data) == [["q": 1]])
        let pull = try await store.beginPull()
        _ = try await store.apply(page([PulledChange(key: .eggs, data: ["q": 6], version: 1)]), epoch: pull.epoch)
        #expect(try await iterator.next()?.map(\.key) == [.eggs, .milk])
    }

    @Test("the device id is made once and kept; a given one must be valid")
    func deviceID() throws {
        let made = try store.deviceID(preferring: nil)
        #expect(made.hasPrefix("d-"))
        #expect(try LocalStore(path: path).deviceID(preferring: nil) == made)
        #expect(try store.deviceID(preferring: "phone-1") == "phone-1")
        #expect(throws: SyncGateClientError.self) { try store.deviceID(preferring: "bad id!") }
        #expect(throws: SyncGateClientError.self) { try store.deviceID(preferring: "") }
    }
}
