@testable import SyncGateHTTP
import SyncGateCore
import SyncGateWire
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// The live waiters' reads of several feeds in one call (`readFeeds`): each request gets what
/// reading its feed alone gives (`readChanges`, the pull's read), in request order, on both drivers.
@Suite(.timeLimit(.minutes(10))) struct FeedReadsTests {
    /// A lingering long-poll is found by its user, device and cursor text, each by bytes: NFC
    /// and NFD "josé" are two users, and one must not adopt the other's waiter (and page).
    @Test func longPollsOfCanonicallyEquivalentUsersDiffer() {
        let composed = LongPoll(userID: "jos\u{E9}", deviceID: "d1", cursor: "v1.x", limit: 100, entityTypes: nil)
        var decomposed = composed
        decomposed.userID = "jose\u{301}"
        #expect(composed != decomposed && Set([composed, decomposed]).count == 2)
        #expect(composed == LongPoll(userID: "jos\u{E9}", deviceID: "d1", cursor: "v1.x", limit: 100, entityTypes: nil))
    }

    @Test(arguments: Driver.selected)
    func eachRequestGetsWhatReadingItsFeedAloneGives(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let created = try await harness.apply(
                (1...6).map { Op.create($0.isMultiple(of: 2) ? "weightLogs" : "contacts", "a\($0)", ["n": .int(Int64($0))]) }, user: "alice"
            )
            #expect(created.allSatisfy { $0.status == .applied })
            #expect(try await harness.apply([Op.delete("contacts", "a1", base: 1)], user: "alice").first?.status == .applied)
            _ = try await harness.apply((1...3).map { Op.create("weightLogs", "b\($0)", ["n": .int(Int64($0))]) }, user: "bob")
            // The tombstone goes, and alice's floor rises past it.
            _ = try await harness.store.purgeTombstones(olderThanMilliseconds: -1)

            let requests = [
                FeedReadRequest(scope: .user("bob"), after: 0, types: nil, limit: 100),
                FeedReadRequest(scope: .user("alice"), after: 0, types: nil, limit: 2),  // 2 and one more
                FeedReadRequest(scope: .user("alice"), after: 4, types: nil, limit: 100),  // the same feed, further on
                FeedReadRequest(scope: .user("alice"), after: 0, types: ["weightLogs"], limit: 100),
                FeedReadRequest(scope: .user("nobody"), after: 0, types: nil, limit: 100),
            ]
            let slices = try await harness.store.readFeeds(requests)
            #expect(slices.count == requests.count)
            for (request, slice) in zip(requests, slices) {
                let alone = try await harness.store.driver.readChanges(
                    [PullPlan.FeedRead(scope: request.scope, after: request.after, resumes: true)], types: request.types, limit: request.limit
                )
                #expect(slice.changes.map(\.sequence) == (alone.rows[request.scope] ?? []).map(\.sequence), "\(request)")
                #expect(slice.floor == alone.floors[request.scope] ?? 0, "\(request)")
            }
            #expect(slices[0].changes.map(\.entityID) == ["b1", "b2", "b3"])
            #expect(slices[1].changes.count == 3)
            #expect(!slices[2].changes.isEmpty && slices[2].changes.allSatisfy { $0.sequence > 4 })
            #expect(slices[3].changes.map(\.entityID) == ["a2", "a4", "a6"])
            #expect(slices[1].floor > 0, "the purge raised alice's floor")
            #expect(slices[4].changes.isEmpty && slices[4].floor == 0)
            #expect(try await harness.store.readFeeds([]).isEmpty)
        }
    }

    /// The front's batching: with its one slot taken by a call the store holds, reads asked for
    /// meanwhile wait, and go together when it ends, `maximumBatch` (here 2) a call; each gets
    /// its own answer.
    @Test(arguments: Driver.selected)
    func readsAskedForDuringACallGoTogetherInTheNext(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            for user in ["alice", "bob", "carol"] {
                _ = try await harness.apply((1...4).map { Op.create("weightLogs", "\(user)\($0)", ["n": .int(Int64($0))]) }, user: user)
            }
            let store = CountingFrontStore(harness.store)
            let batches = FeedReadBatches(store: store, slots: 1, maximumBatch: 2)
            let gate = TestGate("the first call")
            store.holdNextFeedRead(until: gate)
            let first = FeedReadRequest(scope: .user("alice"), after: 0, types: nil, limit: 100)
            let later = [
                FeedReadRequest(scope: .user("bob"), after: 0, types: nil, limit: 100),
                FeedReadRequest(scope: .user("carol"), after: 1, types: nil, limit: 1),
                FeedReadRequest(scope: .user("alice"), after: 2, types: nil, limit: 100),
            ]
            let held = Task { try await batches.read(first) }
            try await eventually("the first call on its way") { store.feedReads.count == 1 }
            let waiting = later.map { request in Task { try await batches.read(request) } }
            try await eventually("three reads waiting") { batches.waitingCount == 3 }
            #expect(store.feedReads.count == 1)
            gate.open()
            let answers = [try await held.value] + (try await waiting.asyncMap { try await $0.value })
            #expect(store.feedReads.map(\.count) == [1, 2, 1])
            #expect(store.feedReads.first == [first])
            #expect(Set(store.feedReads.dropFirst().joined()) == Set(later))
            let alone = try await harness.store.readFeeds([first] + later)
            #expect(answers == alone)
            #expect(answers[2].changes.map(\.entityID) == ["carol2", "carol3"])
            #expect(batches.waitingCount == 0)
        }
    }
}
