import Testing

@testable import SyncGateCore
import SyncGateWire

/// When a standby's pull may go to the client, and when a page is older than a known head.
@Suite(.timeLimit(.minutes(10))) struct ReplicaVerdictTests {
    static let user = Scope.user("alice")
    static let home = Scope.household("h1")

    static func page(
        positions: [Scope: Int64] = [user: 5, home: 3], hasMore: Bool = false, forceResync: Bool = false,
        added: [String] = [], removed: [String] = []
    ) -> PullResult {
        PullResult(
            changes: [], cursor: SyncCursor(userID: "alice", resyncEpoch: 0, positions: positions), hasMore: hasMore,
            forceResync: forceResync, scopesAdded: added, scopesRemoved: removed, deviceWatermark: 0
        )
    }

    struct Unreachable: Error {}

    @Test func aStandbysPageIsAnsweredUnlessItChangesTheHouseholds() {
        #expect(ReplicaVerdict.of(.success(Self.page())) == .answer)
        #expect(ReplicaVerdict.of(.success(Self.page(hasMore: true))) == .answer)
        // A resync is as true on the primary: the standby replayed it.
        #expect(ReplicaVerdict.of(.success(Self.page(forceResync: true))) == .answer)
        // A removal may be the standby not having replayed the membership yet; so may an
        // addition: a cursor the primary issued after a leave, on a standby still holding the
        // membership, reads as a join and would send the household's feed again.
        #expect(ReplicaVerdict.of(.success(Self.page(removed: ["h1"]))) == .askPrimary(.behind))
        #expect(ReplicaVerdict.of(.success(Self.page(added: ["h2"]))) == .askPrimary(.behind))
        // A bootstrap lists every household as added: answered by the standby.
        #expect(ReplicaVerdict.of(.success(Self.page(added: ["h2"])), bootstrap: true) == .answer)
        #expect(ReplicaVerdict.of(.success(Self.page(added: ["h2"], removed: ["h1"])), bootstrap: true) == .askPrimary(.behind))
        #expect(ReplicaVerdict.of(.success(Self.page(added: ["h2"], removed: ["h1"]))) == .askPrimary(.behind))
    }

    @Test(arguments: [
        CursorError.ahead(home), .expired(user), .malformed("cursor comes from a newer resync epoch than the server's"), .otherUser,
    ])
    func everyCursorErrorIsThePrimarysToGive(_ error: CursorError) {
        #expect(ReplicaVerdict.of(.failure(error)) == .askPrimary(.behind))
    }

    @Test func anyOtherFailureIsTheStandbys() {
        #expect(ReplicaVerdict.of(.failure(Unreachable())) == .askPrimary(.failed))
    }

    @Test func aCompletePageIsBehindOnlyWhenAFeedStopsShortOfAKnownHead() {
        let page = Self.page()
        #expect(!page.isBehind([:]))
        #expect(!page.isBehind([Self.user: 5, Self.home: 3]))
        #expect(!page.isBehind([Self.user: 4, Self.home: 1]))
        #expect(page.isBehind([Self.user: 6]))
        #expect(page.isBehind([Self.user: 5, Self.home: 4]))
        // Heads of feeds the page does not read are not its business.
        #expect(!page.isBehind([.household("elsewhere"): 100]))
        // A page with more to read, or one that asks for a resync, is not behind.
        #expect(!Self.page(hasMore: true).isBehind([Self.user: 100]))
        #expect(!Self.page(forceResync: true).isBehind([Self.user: 100]))
    }
}
