import Foundation
import SyncGateCore
import SyncGateWire
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// Apply and pull through the store, on every driver.
@Suite(.timeLimit(.minutes(10))) struct PipelineTests {
    @Test(arguments: Driver.selected)
    func appliedChangesAppearInTheFeedInOrder(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let first = try await harness.apply([
                Op.create("weightLogs", "w1", ["kg": 70]),
                Op.create("categories", "c1", ["name": "Food"]),
            ])
            #expect(first.map(\.outcome) == ["applied", "applied"])
            #expect(first.map(\.version) == [1, 1])
            let second = try await harness.apply([Op.update("weightLogs", "w1", base: 1, ["kg": 71]), Op.delete("categories", "c1", base: 1)])
            #expect(second.map(\.outcome) == ["applied", "applied"])

            let (changes, last) = try await harness.pullAll()
            #expect(changes.map(\.sequence) == [1, 2, 3, 4])
            #expect(changes.map(\.entityID) == ["w1", "c1", "w1", "c1"])
            #expect(changes[2].data == ["kg": 71] && changes[2].version == 2)
            #expect(changes[3].data == nil && changes[3].version == 2)
            #expect(changes.allSatisfy { $0.scope == .user("alice") })
            #expect(!last.hasMore && !last.forceResync)

            // Nothing new after the cursor; another user sees nothing of alice's.
            #expect(try await harness.pullAll(from: last.cursor).changes.isEmpty)
            #expect(try await harness.pullAll(user: "bob").changes.isEmpty)
        }
    }

    @Test(arguments: Driver.selected)
    func idempotencyKeysAnswerDuplicateAcrossJobs(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let create = Op.create("weightLogs", "w1", ["kg": 70], key: "k-create")
            #expect(try await harness.apply([create]).map(\.outcome) == ["applied"])
            #expect(try await harness.apply([Op.update("weightLogs", "w1", base: 1, ["kg": 72], key: "k-update")]).map(\.outcome) == ["applied"])
            let replay = try await harness.apply([create, Op.update("weightLogs", "w1", base: 1, ["kg": 72], key: "k-update")])
            #expect(replay.map(\.outcome) == ["duplicate", "duplicate"])
            #expect(replay.map(\.version) == [1, 2])
            #expect(try await harness.pullAll().changes.count == 2)
            // Keys are per user.
            #expect(try await harness.apply([create], user: "bob").map(\.outcome) == ["applied"])
        }
    }

    @Test(arguments: Driver.selected)
    func pagingFollowsTheLimitAndHasMore(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            _ = try await harness.apply((1...7).map { Op.create("weightLogs", "w\($0)", ["kg": .int(Int64($0))]) })
            var cursor: SyncCursor?
            var pages: [[String]] = []
            while true {
                let page = try await harness.store.pull(PullQuery(userID: "alice", deviceID: "d1", cursor: cursor, limit: 3))
                pages.append(page.changes.map(\.entityID))
                cursor = page.cursor
                if !page.hasMore { break }
            }
            #expect(pages == [["w1", "w2", "w3"], ["w4", "w5", "w6"], ["w7"]])
        }
    }

    @Test(arguments: Driver.selected)
    func entityTypeFiltersAdvanceTheCursorPastFilteredRows(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            _ = try await harness.apply([
                Op.create("weightLogs", "w1", ["kg": 1]), Op.create("contacts", "c1", ["n": 1]),
                Op.create("contacts", "c2", ["n": 2]), Op.create("weightLogs", "w2", ["kg": 2]), Op.create("contacts", "c3", ["n": 3]),
            ])
            let filtered = try await harness.pullAll(limit: 1, types: ["weightLogs"])
            #expect(filtered.changes.map(\.entityID) == ["w1", "w2"])
            // The cursor moved past the contacts too: nothing is left for an unfiltered reader.
            #expect(filtered.last.cursor.positions[.user("alice")] == 5)
            #expect(try await harness.pullAll(from: filtered.last.cursor).changes.isEmpty)
        }
    }

    @Test(arguments: Driver.selected)
    func cursorsOfOtherUsersAndFromTheFutureAreInvalid(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            _ = try await harness.apply([Op.create("weightLogs", "w1", ["kg": 1])])
            let page = try await harness.pullAll().last
            let ahead = SyncCursor(userID: "alice", resyncEpoch: 0, positions: [.user("alice"): 99])
            await #expect(throws: CursorError.ahead(.user("alice"))) {
                try await harness.store.pull(PullQuery(userID: "alice", deviceID: "d1", cursor: ahead, limit: 10))
            }
            #expect(throws: CursorError.otherUser) { try SyncCursor.decode(page.cursor.encoded(), expectedUserID: "bob") }
        }
    }

    @Test(arguments: Driver.selected)
    func theDeviceWatermarkIsTheNewestFinishedJobOfThatDevice(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            #expect(try await harness.pullAll(device: "phone").last.deviceWatermark == 0)
            let phone = try await harness.push([Op.create("weightLogs", "w1", ["kg": 1])], device: "phone")
            let tablet = try await harness.push([Op.create("weightLogs", "w2", ["kg": 1])], device: "tablet")
            #expect(try await harness.pullAll(device: "phone").last.deviceWatermark == 0)
            try await harness.drain()
            #expect(try await harness.pullAll(device: "phone").last.deviceWatermark == phone)
            #expect(try await harness.pullAll(device: "tablet").last.deviceWatermark == tablet)
        }
    }

    @Test(arguments: Driver.selected)
    func eachPolicyResolvesThroughTheStore(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let early = Timestamp(rfc3339: "2026-01-15T10:00:00Z")!
            let late = Timestamp(rfc3339: "2026-01-15T11:00:00Z")!
            _ = try await harness.apply([
                Op.create("weightLogs", "lww", ["kg": 1], at: late),
                Op.create("recentFoods", "cw", ["n": 1], at: late),
                Op.create("userGoals", "fm", ["calories": 2000, "protein": 100], at: early),
            ])
            _ = try await harness.apply([Op.update("userGoals", "fm", base: 1, ["calories": 1800], at: late)])
            let conflicts = try await harness.apply([
                Op.update("weightLogs", "lww", base: 0, ["kg": 2], at: early),
                Op.update("recentFoods", "cw", base: 0, ["n": 2], at: early),
                Op.update("userGoals", "fm", base: 1, ["calories": 1500, "protein": 120], at: early),
                Op.update("weightLogs", "lww", base: 5, ["kg": 3]),
            ])
            #expect(conflicts.map(\.outcome) == ["server_wins", "client_wins", "merged", "VALIDATION_ERROR"])
            #expect(conflicts[0].serverData == ["kg": 1] && conflicts[0].version == 1)
            #expect(conflicts[1].version == 2)
            #expect(conflicts[2].mergedData == ["calories": 1800, "protein": 120] && conflicts[2].version == 3)
        }
    }
}

extension PipelineTests {
    /// A job's changes enter the feed in the order of each entity's last write, with consecutive
    /// sequence numbers: a project renamed after its entry was created lands after the entry.
    @Test(arguments: Driver.selected)
    func aJobsChangesEnterTheFeedInTheOrderOfTheirLastWrite(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            for trial in 0..<8 {
                let (project, entry, contact) = ("p\(trial)", "te\(trial)", "c\(trial)")
                let results = try await harness.apply([
                    Op.create("projects", project, ["name": "P"]),
                    Op.create("timeEntries", entry, ["project_id": .string(project), "minutes": 30]),
                    Op.update("projects", project, base: 1, ["name": "Renamed"]),
                    Op.create("contacts", contact, ["name": "Ada"]),
                    Op.update("timeEntries", entry, base: 1, ["minutes": 45]),
                ])
                #expect(results.map(\.outcome) == ["applied", "applied", "applied", "applied", "applied"])
            }
            let changes = try await harness.pullAll().changes
            #expect(changes.map(\.sequence) == Array(1...Int64(changes.count)))
            for trial in 0..<8 {
                let job = changes[(trial * 3)..<(trial * 3 + 3)]
                #expect(job.map(\.entityID) == ["p\(trial)", "c\(trial)", "te\(trial)"], "trial \(trial)")
                #expect(job.map(\.version) == [2, 1, 2])
            }
        }
    }
}
