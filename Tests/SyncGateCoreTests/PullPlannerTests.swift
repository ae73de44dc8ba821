import Testing

import SyncGateCore
import SyncGateWire

/// The planner's reads stop at the heads of the context it was given: the memberships it trusts
/// and the changes it reads come from the same moment.
@Suite(.timeLimit(.minutes(10))) struct PullPlannerTests {
    static let feeds: [Scope: FeedInfo] = [.user("bob"): FeedInfo(head: 7, floor: 0), .household("home"): FeedInfo(head: 12, floor: 0)]

    static func query(_ cursor: SyncCursor?) -> PullQuery { PullQuery(userID: "bob", deviceID: "d", cursor: cursor, limit: 100) }

    static func bounds(_ plan: PullPlan) -> [String: Int64?] {
        Dictionary(uniqueKeysWithValues: plan.reads.map { ($0.scope.key, $0.through) })
    }

    @Test func aBootstrapReadsEachFeedUpToItsHead() throws {
        let plan = try PullPlanner.plan(Self.query(nil), households: ["home", "new"], resyncEpoch: 0, feeds: Self.feeds)
        // A household without a feed row has had no change: nothing to read.
        #expect(Self.bounds(plan) == ["u:bob": 7, "h:home": 12, "h:new": 0])
    }

    @Test func aCursorReadsEachFeedUpToItsHead() throws {
        let cursor = SyncCursor(userID: "bob", resyncEpoch: 0, positions: [.user("bob"): 3, .household("home"): 0])
        let plan = try PullPlanner.plan(Self.query(cursor), households: ["home", "joined"], resyncEpoch: 0, feeds: Self.feeds)
        #expect(Self.bounds(plan) == ["u:bob": 7, "h:home": 12, "h:joined": 0])
        #expect(plan.reads.map(\.after) == [3, 0, 0])
    }

    @Test func canonicallyEquivalentHouseholdsAreEachRead() throws {
        let plan = try PullPlanner.plan(Self.query(nil), households: ["caf\u{E9}", "cafe\u{301}", "caf\u{E9}"], resyncEpoch: 0, feeds: Self.feeds)
        #expect(plan.reads.count == 3 && Set(plan.reads.map(\.scope)).count == 3)
    }

    @Test func aContinuationIsNotBounded() {
        let cursor = SyncCursor(userID: "bob", resyncEpoch: 0, positions: [.user("bob"): 3, .household("home"): 5])
        let plan = PullPlanner.continuing(Self.query(cursor), cursor: cursor, heads: [.household("home"): 9], scopesVersion: 0)
        #expect(plan.reads.allSatisfy { $0.through == nil })
    }

    static func change(_ scope: Scope, _ sequence: Int64, bytes: Int) -> FeedChange {
        FeedChange(
            scope: scope, sequence: sequence, entityType: "notes", entityID: "n\(sequence)", version: 1,
            data: ["text": .string(String(repeating: "x", count: bytes))], updatedAt: Timestamp(millisecondsSinceEpoch: 0)
        )
    }

    /// A page ends once its changes reach the query's bytes, not only at its count: the cursor
    /// stops after the last change given, feeds after it keep their positions, and hasMore says
    /// so. One change larger than the whole budget still makes a page of its own.
    @Test func aPageEndsAtItsBytes() throws {
        let cursor = SyncCursor(userID: "bob", resyncEpoch: 0, positions: [.user("bob"): 0, .household("home"): 4])
        var query = Self.query(cursor)
        query.maximumBytes = 3_000
        let plan = try PullPlanner.plan(query, households: ["home"], resyncEpoch: 0, feeds: Self.feeds)
        let user = (1...7).map { Self.change(.user("bob"), $0, bytes: 1_000) }
        let home = (5...12).map { Self.change(.household("home"), $0, bytes: 10) }
        let page = plan.assemble(pages: [.user("bob"): user, .household("home"): home], deviceWatermark: 0)
        // Three changes reach 3,000 bytes (each ~1,000 and its fields).
        #expect(page.changes.map(\.sequence) == [1, 2, 3])
        #expect(page.hasMore)
        #expect(page.cursor.positions == [.user("bob"): 3, .household("home"): 4])

        // From there on, pages go on where the last ended, and the last one has no more.
        var positions = page.cursor
        var seen = page.changes.map { "\($0.scope.key)/\($0.sequence)" }
        for _ in 0..<10 {
            let next = try PullPlanner.plan(query.continuing(at: positions), households: ["home"], resyncEpoch: 0, feeds: Self.feeds)
            let pages = Dictionary(uniqueKeysWithValues: next.reads.map { read in
                (read.scope, (read.scope == .user("bob") ? user : home).filter { $0.sequence > read.after })
            })
            let result = next.assemble(pages: pages, deviceWatermark: 0)
            seen += result.changes.map { "\($0.scope.key)/\($0.sequence)" }
            positions = result.cursor
            if !result.hasMore { break }
        }
        #expect(seen == (1...7).map { "u:bob/\($0)" } + (5...12).map { "h:home/\($0)" })
        #expect(positions.positions == [.user("bob"): 7, .household("home"): 12])

        // A change past the whole budget is a page by itself.
        query.maximumBytes = 100
        let single = try PullPlanner.plan(query, households: ["home"], resyncEpoch: 0, feeds: Self.feeds)
            .assemble(pages: [.user("bob"): user, .household("home"): home], deviceWatermark: 0)
        #expect(single.changes.map(\.sequence) == [1] && single.hasMore)
    }
}
