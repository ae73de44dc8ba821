import Foundation
import SyncGateCore
import SyncGateWire
import SyncGateStorage
@testable import SyncGateDialects
import SyncGateTestSupport
import Testing
import SyncGateConcurrency

/// Reads by `since` time (the seed apps' dialects) are exactly as safe as the cursor: DESIGN.md's
/// invariant 3 ("no skipped changes"), proven the same ways, on both drivers.
@Suite(.timeLimit(.minutes(10))) struct SinceReadTests {
    /// Pages from `since` until `hasMore` is false; returns what it read and the last serverTime.
    static func readAll(_ harness: StoreHarness, user: String, since: Int64?, household: String? = nil, limit: Int = 500) async throws -> (changes: [FeedChange], serverTime: Int64) {
        var since = since
        var changes: [FeedChange] = []
        for _ in 0..<10_000 {
            let page = try await harness.dialects.changesSince(SinceQuery(userID: user, since: since, household: household, limit: limit))
            changes += page.changes
            since = page.serverTime
            if !page.hasMore { return (changes, page.serverTime) }
        }
        throw TestEnvironmentError(description: "paging by time did not end")
    }

    /// The cursor's concurrent test, with `since`: 8 users push into one household and their own
    /// feeds through 4 workers while a reader pages by time (7 a page, so pages end mid-feed and
    /// mid-job); every change of the reader's feeds reaches it.
    @Test(arguments: Driver.selected)
    func aReaderPagingBySinceMissesNothingWhileWorkersCommitConcurrently(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            // Nothing is applied before the workers start: reading now starts before every push.
            let (users, ids) = try await InvariantTests.contendedHouseholdWorkload(harness)
            let reader = users[0]
            let since = Locked<Int64?>(try await Self.readAll(harness, user: reader, since: nil).serverTime)
            let seen = Locked<Set<String>>([])
            let pages = Locked(0)
            try await InvariantTests.pageWhileWorkersCommit(harness, jobs: ids) {
                let page = try await harness.dialects.changesSince(SinceQuery(userID: reader, since: since.value, limit: 7))
                pages.update { $0 += 1 }
                seen.update { seen in for change in page.changes { seen.insert("\(change.scope.key)#\(change.sequence)") } }
                since.update { $0 = page.serverTime }
                return page.hasMore
            }
            let everything = try await harness.pullAll(user: reader).changes
            let written = Set(everything.filter { $0.entityType != "households" && $0.entityType != "household_members" }.map { "\($0.scope.key)#\($0.sequence)" })
            #expect(written.count == users.count * 6 * 3 + 6)
            // Within a feed, times follow commit order, as sequence numbers do.
            let times = try await harness.queryTexts("SELECT CAST(committed_at AS TEXT) FROM changes WHERE scope = 'h:h1' ORDER BY seq").compactMap { Int64($0) }
            #expect(times.count == everything.filter { $0.scope == .household("h1") }.count)
            let inversions = zip(times, times.dropFirst()).filter { $0 > $1 }.count
            #expect(inversions == 0, "\(inversions) commit times out of sequence order in the household feed")
            let missed = written.subtracting(seen.value)
            #expect(missed.isEmpty, "missed \(missed.sorted().prefix(10)) of \(written.count) in \(pages.value) pages")
        }
    }

    /// Deterministically: one job is held inside its apply transaction after writing its change
    /// (so the change's time is already fixed, below the clock); a reader pages meanwhile. The
    /// serverTime it is given never passes the held change, which it reads once it commits. A
    /// horizon from the clock alone would pass it and skip it for good.
    @Test(arguments: Driver.selected)
    func aReaderIsNeverGivenATimePastAChangeHeldUncommitted(_ driver: Driver) async throws {
        let hold = HeldApply("the job to be held in its transaction")
        try await StoreHarness.with(driver, hooks: hold.hooks) { harness in
            _ = try await harness.apply([Op.create("households", "h", ["name": "Shared"]), Op.create("household_members", "h:carol", ["user_id": "carol", "role": "member"])])
            var since = try await Self.readAll(harness, user: "carol", since: nil).serverTime
            let id = try await harness.push([Op.create("inventory", "held", ["n": 1], household: "h")], user: "alice")
            hold.hold(id)
            let store = harness.store
            let claimed = try await store.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 60_000)
            #expect(claimed.map(\.id) == [id])
            let collections = harness.collections
            let apply = Task { try await store.apply(claimed[0], collections: collections, now: .now()) }
            try await hold.held.wait()
            // Time passes on the clock while the change waits uncommitted.
            var seen: [String] = []
            for _ in 0..<5 {
                try await Task.sleep(for: .milliseconds(30))
                let page = try await harness.dialects.changesSince(SinceQuery(userID: "carol", since: since, limit: 100))
                seen += page.changes.map(\.entityID)
                since = page.serverTime
            }
            #expect(seen.isEmpty)
            hold.release.open()
            #expect(try await value(of: apply, "the held apply to finish once released").isDone)
            seen += try await Self.readAll(harness, user: "carol", since: since).changes.map(\.entityID)
            #expect(seen == ["held"])
        }
    }

    /// A household joined after `since` arrives whole, even its changes from before: they count
    /// as made at the join. A feed of one job's many changes (one time) is paged past whole.
    @Test(arguments: Driver.selected)
    func aJoinedHouseholdArrivesWholeAndOneTimeIsNeverSplit(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            _ = try await harness.apply([Op.create("weightLogs", "w0", ["kg": 80])], user: "bob")
            let before = try await Self.readAll(harness, user: "bob", since: nil)
            #expect(before.changes.map(\.entityID) == ["w0"])
            // Alice's household and 20 items, in one job: one commit time.
            var setup = [Op.create("households", "h", ["name": "Home"])]
            setup += (0..<20).map { Op.create("inventory", "i\($0)", ["n": .int(Int64($0))], household: "h") }
            _ = try await harness.apply(setup, user: "alice")
            // Bob joins later.
            _ = try await harness.apply([Op.create("household_members", "h:bob", ["user_id": "bob", "role": "member"])], user: "alice")
            // Pages of 5: the 20 items (and the household and memberships) come whole, never split.
            let first = try await harness.dialects.changesSince(SinceQuery(userID: "bob", since: before.serverTime, limit: 5))
            #expect(first.hasMore)
            #expect(first.changes.count == 23)
            let rest = try await Self.readAll(harness, user: "bob", since: first.serverTime, limit: 5)
            #expect(rest.changes.isEmpty)
            #expect(Set(first.changes.map(\.entityID)) == Set(["h", "h:alice", "h:bob"] + (0..<20).map { "i\($0)" }))
            // Alice, a member from the start, pages through the same job's 22 changes in one page too.
            let alice = try await harness.dialects.changesSince(SinceQuery(userID: "alice", since: nil, limit: 5))
            #expect(alice.changes.count == 22 && alice.hasMore)
        }
    }

    @Test(arguments: Driver.selected)
    func oneHouseholdIsReadOnlyByItsMembers(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            _ = try await harness.apply([Op.create("households", "h", ["name": "Home"]), Op.create("inventory", "milk", ["n": 1], household: "h")])
            _ = try await harness.apply([Op.create("weightLogs", "w", ["kg": 1])])
            let page = try await harness.dialects.changesSince(SinceQuery(userID: "alice", since: nil, household: "h", limit: 100))
            #expect(Set(page.changes.map(\.entityID)) == ["h", "h:alice", "milk"])
            await #expect(throws: ProtocolError.self) {
                _ = try await harness.dialects.changesSince(SinceQuery(userID: "mallory", since: nil, household: "h", limit: 100))
            }
            let full = try await harness.dialects.liveDocuments(userID: "alice", household: nil, types: nil)
            #expect(Set(full.documents.map(\.key.entityID)) == ["h", "h:alice", "milk", "w"])
            // Nothing written since: the full sync's time reads on to nothing.
            #expect(try await Self.readAll(harness, user: "alice", since: full.serverTime).changes.isEmpty)
        }
    }
}
