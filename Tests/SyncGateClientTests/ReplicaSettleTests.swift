import Testing

@testable import SyncGateClient

@Suite("Applying push results", .timeLimit(.minutes(10)))
struct ReplicaSettleTests {
    /// A slice with the server at version 2 and one sent update (`k1`) of milk.
    func sentUpdate() throws -> (ReplicaSlice, KeyMaker) {
        let keys = KeyMaker()
        var slice = ReplicaSlice(server: [.milk: ServerRecord(version: 2, data: ["name": "Milk", "quantity": 2])])
        try record(.patch(["quantity": 3]), on: .milk, in: &slice, keys: keys)
        markSent(["k1"], in: &slice)
        return (slice, keys)
    }

    @Test("applied: acknowledged at its version, still shown until the server state catches up")
    func applied() throws {
        var (slice, _) = try sentUpdate()
        let settlement = slice.settle(batch: ["k1"], results: [result("k1", .milk, .applied, version: 3)], pullEpoch: 7)
        #expect(settlement.outcomes == [WriteOutcome(idempotencyKey: "k1", key: .milk, result: .applied(version: 3))])
        #expect(settlement.retryable.isEmpty)
        #expect(slice.outbox.first?.state == .acknowledged(version: 3, epoch: 7, jobID: nil))
        #expect(slice.view(of: .milk) == .init(data: ["name": "Milk", "quantity": 3], version: 2, hasPendingWrites: false))
        slice.apply([PulledChange(key: .milk, data: ["name": "Milk", "quantity": 3], version: 3)])
        #expect(slice.outbox.isEmpty)
        #expect(slice.view(of: .milk) == .init(data: ["name": "Milk", "quantity": 3], version: 3, hasPendingWrites: false))
    }

    @Test("client_wins and duplicate are acknowledged like applied")
    func clientWinsAndDuplicate() throws {
        for status in [OperationResult.Status.conflict(.clientWins), .duplicate] {
            var (slice, _) = try sentUpdate()
            let settlement = slice.settle(batch: ["k1"], results: [result("k1", .milk, status, version: 5)], pullEpoch: 1)
            #expect(settlement.outcomes.first?.result == (status == .conflict(.clientWins) ? .clientWins(version: 5) : .duplicate(version: 5)))
            #expect(slice.outbox.first?.state == .acknowledged(version: 5, epoch: 1, jobID: nil))
        }
    }

    @Test("server_wins: the server's document replaces the write, or its deletion removes the entity")
    func serverWins() throws {
        var (slice, _) = try sentUpdate()
        var settlement = slice.settle(batch: ["k1"], results: [result("k1", .milk, .conflict(.serverWins), version: 4, serverData: ["name": "Oat milk"])], pullEpoch: 1)
        #expect(settlement.outcomes.first?.result == .serverWins(version: 4, data: ["name": "Oat milk"]))
        #expect(slice.outbox.isEmpty)
        #expect(slice.view(of: .milk) == .init(data: ["name": "Oat milk"], version: 4, hasPendingWrites: false))

        (slice, _) = try sentUpdate()
        settlement = slice.settle(batch: ["k1"], results: [result("k1", .milk, .conflict(.serverWins), version: 5, serverData: nil)], pullEpoch: 1)
        #expect(settlement.outcomes.first?.result == .serverWins(version: 5, data: nil))
        #expect(slice.server[.milk] == nil)
        #expect(slice.view(of: .milk).data == nil)
    }

    @Test("an answer about a version older than a pulled delete does not bring the entity back")
    func pulledDeleteHolds() throws {
        let answers: [OperationResult] = [
            result("k1", .milk, .conflict(.merged), version: 3, merged: ["name": "Milk", "quantity": 3]),
            result("k1", .milk, .conflict(.serverWins), version: 3, serverData: ["name": "Milk", "quantity": 2]),
        ]
        for answer in answers {
            var (slice, _) = try sentUpdate()
            // Another device deleted milk at version 4; the pull brings it before the job's answer.
            slice.apply([PulledChange(key: .milk, data: nil, version: 4)])
            #expect(slice.tombstones == [.milk: 4])
            _ = slice.settle(batch: ["k1"], results: [answer], pullEpoch: 1)
            #expect(slice.server[.milk] == nil)
            #expect(slice.view(of: .milk).data == nil)
            // No write of milk is left: nothing can describe it again, so the tombstone goes.
            #expect(slice.tombstones.isEmpty)
        }
    }

    @Test("a change pulled after a delete is taken whatever its version: the server may have purged the entity and re-created it at 1")
    func aRecreateAfterAPurgeIsPulled() throws {
        var (slice, _) = try sentUpdate()
        slice.apply([PulledChange(key: .milk, data: nil, version: 4)])
        slice.apply([PulledChange(key: .milk, data: ["name": "Oat milk"], version: 1)])
        #expect(slice.server[.milk] == ServerRecord(version: 1, data: ["name": "Oat milk"]))
        #expect(slice.tombstones.isEmpty)
    }

    @Test("an acknowledged write older than a pulled delete leaves with it; an answer at a newer version is adopted")
    func acknowledgedBeforeADelete() throws {
        var (slice, keys) = try sentUpdate()
        _ = slice.settle(batch: ["k1"], results: [result("k1", .milk, .applied, version: 3)], pullEpoch: 1)
        try record(.put(["name": "Milk", "quantity": 1]), on: .milk, in: &slice, keys: keys)
        slice.apply([PulledChange(key: .milk, data: nil, version: 4)])
        #expect(slice.outbox.map(\.idempotencyKey) == ["k2"])
        #expect(slice.tombstones == [.milk: 4])
        markSent(["k2"], in: &slice)
        _ = slice.settle(batch: ["k2"], results: [result("k2", .milk, .conflict(.merged), version: 5, merged: ["name": "Milk", "quantity": 1])], pullEpoch: 1)
        #expect(slice.server[.milk] == ServerRecord(version: 5, data: ["name": "Milk", "quantity": 1]))
        #expect(slice.tombstones.isEmpty)
    }

    @Test("merged: the merged document is the state at its version")
    func merged() throws {
        var (slice, _) = try sentUpdate()
        let settlement = slice.settle(batch: ["k1"], results: [result("k1", .milk, .conflict(.merged), version: 6, merged: ["name": "Milk", "quantity": 3, "unit": "l"])], pullEpoch: 1)
        #expect(settlement.outcomes.first?.result == .merged(version: 6, data: ["name": "Milk", "quantity": 3, "unit": "l"]))
        #expect(slice.outbox.isEmpty)
        #expect(slice.server[.milk] == ServerRecord(version: 6, data: ["name": "Milk", "quantity": 3, "unit": "l"]))
    }

    @Test("server_wins and merged for a household the device no longer reads: the document is not adopted")
    func unreadableHousehold() throws {
        for status in [OperationResult.Status.conflict(.serverWins), .conflict(.merged)] {
            var slice = ReplicaSlice()
            try record(.put(["name": "Milk"]), on: .milk, in: &slice, keys: KeyMaker())
            markSent(["k1"], in: &slice)
            let settlement = slice.settle(
                batch: ["k1"], results: [result("k1", .milk, status, version: 3, serverData: ["name": "Oat milk"], merged: ["name": "Oat milk"])],
                pullEpoch: 1, unreadable: ["home"]
            )
            #expect(settlement.outcomes.count == 1)
            #expect(slice.outbox.isEmpty)
            #expect(slice.server[.milk] == nil)
            #expect(slice.view(of: .milk).data == nil)
        }
        // Another household, or the user's own scope, is unaffected.
        var (slice, _) = try sentUpdate()
        _ = slice.settle(batch: ["k1"], results: [result("k1", .milk, .conflict(.serverWins), version: 4, serverData: ["name": "Oat milk"])], pullEpoch: 1, unreadable: ["cabin"])
        #expect(slice.server[.milk]?.version == 4)
    }

    @Test("rejected: the write leaves the outbox and the view shows the server's state again")
    func rejected() throws {
        var (slice, _) = try sentUpdate()
        let settlement = slice.settle(
            batch: ["k1"], results: [result("k1", .milk, .rejected(errorCode: "PERMISSION_DENIED", message: "not a member", retryable: false))], pullEpoch: 1
        )
        #expect(settlement.outcomes == [WriteOutcome(idempotencyKey: "k1", key: .milk, result: .rejected(code: "PERMISSION_DENIED", message: "not a member"))])
        #expect(slice.outbox.isEmpty)
        #expect(slice.view(of: .milk) == .init(data: ["name": "Milk", "quantity": 2], version: 2, hasPendingWrites: false))
    }

    @Test("retryable rejections and missing results keep the entry, sent, with the same key")
    func retryable() throws {
        var (slice, keys) = try sentUpdate()
        try record(.put(["name": "Eggs"]), on: .eggs, in: &slice, keys: keys)
        markSent(["k2"], in: &slice)
        let settlement = slice.settle(
            batch: ["k1", "k2"], results: [result("k1", .milk, .rejected(errorCode: "INTERNAL", message: "job died", retryable: true))], pullEpoch: 1
        )
        #expect(settlement.outcomes.isEmpty)
        #expect(settlement.retryable == ["k1", "k2"])
        #expect(slice.outbox.map(\.idempotencyKey) == ["k1", "k2"])
        #expect(slice.outbox.allSatisfy { $0.state == .sent(jobID: nil) })
        #expect(slice.view(of: .milk).data?["quantity"] == 3)
    }

    @Test("the write that followed takes the resulting version as its base when the first took effect")
    func rebase() throws {
        for (status, expectedBase) in [(OperationResult.Status.applied, Int64(3)), (.duplicate, 3), (.conflict(.clientWins), 3), (.conflict(.merged), 3)] {
            var (slice, keys) = try sentUpdate()
            try record(.patch(["quantity": 4]), on: .milk, in: &slice, keys: keys)
            #expect(slice.outbox[1].followsPending)
            _ = slice.settle(batch: ["k1"], results: [result("k1", .milk, status, version: 3, merged: ["quantity": 3])], pullEpoch: 1)
            let follower = try #require(slice.outbox.first { $0.idempotencyKey == "k2" })
            #expect(!follower.followsPending)
            #expect(follower.baseVersion == expectedBase)
        }
    }

    @Test("after a loss or a rejection, the write that followed keeps the base version it was made on")
    func noRebase() throws {
        for status in [OperationResult.Status.conflict(.serverWins), .rejected(errorCode: "VALIDATION_ERROR", message: "", retryable: false)] {
            var (slice, keys) = try sentUpdate()
            try record(.patch(["quantity": 4]), on: .milk, in: &slice, keys: keys)
            _ = slice.settle(batch: ["k1"], results: [result("k1", .milk, status, version: 9, serverData: ["quantity": 1])], pullEpoch: 1)
            let follower = try #require(slice.outbox.first { $0.idempotencyKey == "k2" })
            #expect(!follower.followsPending)
            #expect(follower.baseVersion == 2)
        }
    }

    @Test("an answer older than the local record does not replace it; a stale record is replaced")
    func adopt() throws {
        var slice = ReplicaSlice(server: [.milk: ServerRecord(version: 9, data: ["quantity": 9])])
        slice.adopt(["quantity": 4], version: 4, for: .milk)
        #expect(slice.server[.milk]?.version == 9)
        slice.adopt(nil, version: 8, for: .milk)
        #expect(slice.server[.milk]?.version == 9)
        slice.server[.milk]?.stale = true
        slice.adopt(["quantity": 1], version: 1, for: .milk)
        #expect(slice.server[.milk] == ServerRecord(version: 1, data: ["quantity": 1], stale: false))
    }

    @Test("a refused write leaves and releases the write that followed it")
    func refuse() throws {
        var (slice, keys) = try sentUpdate()
        try record(.patch(["quantity": 4]), on: .milk, in: &slice, keys: keys)
        let outcome = slice.refuse(idempotencyKey: "k1", code: "PAYLOAD_TOO_LARGE", message: "big")
        #expect(outcome?.result == .rejected(code: "PAYLOAD_TOO_LARGE", message: "big"))
        #expect(slice.outbox.map(\.idempotencyKey) == ["k2"])
        #expect(slice.outbox[0].followsPending == false)
    }
}
