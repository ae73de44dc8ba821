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
}
