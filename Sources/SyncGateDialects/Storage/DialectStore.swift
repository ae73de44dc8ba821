package import SyncGateCore
package import SyncGateWire
import SyncGateStorage

/// A read of the feeds by time, for the seed apps' dialects.
package struct SinceQuery: Sendable, Hashable {
    package var userID: String
    /// Changes after this time (milliseconds since the epoch); `nil`: from the beginning.
    package var since: Int64?
    /// One household's feed (the caller must be an active member); `nil`: the user's own feed
    /// and every household they belong to.
    package var household: String?
    package var entityTypes: Set<String>?
    package var limit: Int
}

package struct SincePage: Sendable, Hashable {
    package var changes: [FeedChange]
    /// What the client sends back as `since` (milliseconds since the epoch).
    package var serverTime: Int64
    package var hasMore: Bool
}

/// A live document of a full sync.
package struct LiveDocument: Sendable, Hashable {
    package var key: EntityKey
    package var version: Int64
    package var data: JSONObject
    package var updatedAt: Timestamp
}

package struct LiveDocuments: Sendable, Hashable {
    package var documents: [LiveDocument]
    /// What the client sends back as `since` next (milliseconds since the epoch).
    package var serverTime: Int64
}

/// The dialects' reads: by commit time (a `since` the client sends back) and every live document,
/// over a driver's ``DialectDriver`` reads. Writes go through the ordinary job pipeline.
package struct DialectStore: Sendable {
    package let driver: any DialectDriver

    package init(driver: any DialectDriver) {
        self.driver = driver
    }

    /// The changes of the query's feeds after `since`, by time.
    ///
    /// No skipped change, as with cursors: the horizon, read first, is below the start of every
    /// apply transaction still open (each starts after its job's claim, and the horizon is below
    /// the oldest running claim and the clock), and every change records its transaction's start
    /// as its commit time. So every change at or below the horizon is committed and visible to
    /// the reads that follow, and every change that commits later lies above it. Pages hold only
    /// changes up to the horizon and end between two times (``SincePaging``); the client's next
    /// `since` is the last time it was given. A household the user joined after `since` is read
    /// whole: its older changes count as made at the join.
    package func changesSince(_ query: SinceQuery) async throws -> SincePage {
        let horizon = try await driver.commitHorizon()
        let scopes = try await feeds(userID: query.userID, household: query.household)
        var joins: [Scope: Int64] = [:]
        if query.since != nil {
            let memberships = scopes.compactMap { $0.householdID.map { HouseholdIDs.membershipKey(household: $0, user: query.userID) } }
            for (key, time) in try await driver.latestCommitTimes(memberships) { joins[key.scope] = time }
        }
        // A join the horizon does not cover yet is read next time, when it does.
        let reads = scopes.compactMap { scope -> TimedRead? in
            let joined = joins[scope] ?? .min
            return joined > horizon ? nil : TimedRead(scope: scope, visibleFrom: joined)
        }
        let after = query.since ?? .min
        var rows = try await driver.readChanges(reads, after: after, through: horizon, types: query.entityTypes, limit: query.limit + 1)
        let serverTime: Int64
        let hasMore: Bool
        switch SincePaging.cut(times: rows.map(\.time), limit: query.limit) {
        case .complete:
            // A client whose `since` is ahead of the horizon (another server's clock) is moved
            // back to it: it may read a change twice, never miss one.
            (serverTime, hasMore) = (horizon, false)
        case .through(let count, let time):
            rows.removeLast(rows.count - count)
            (serverTime, hasMore) = (time, true)
        case .sameTime(let time):
            rows = try await driver.readChanges(reads, after: time - 1, through: time, types: query.entityTypes, limit: .max)
            (serverTime, hasMore) = (time, true)
        }
        let changes = try rows.map { timed throws(StoredDataError) in try FeedChange(scope: timed.scope, row: timed.row) }
        return SincePage(changes: changes, serverTime: serverTime, hasMore: hasMore)
    }

    /// Every live document of the user's feeds (or one household's), and the time to read on from.
    package func liveDocuments(userID: String, household: String?, types: Set<String>?) async throws -> LiveDocuments {
        // Read first: whatever the documents miss commits above it.
        let horizon = try await driver.commitHorizon()
        let scopes = try await feeds(userID: userID, household: household)
        let documents = try await driver.liveEntities(scopes: scopes, types: types).compactMap { row throws(StoredDataError) -> LiveDocument? in
            guard let scope = Scope(key: row.scope) else { throw StoredDataError("entity row has a malformed scope '\(row.scope)'") }
            let key = EntityKey(scope: scope, entityType: row.entityType, entityID: row.entityID)
            guard let data = try EntityState.document(row.data, of: key.description) else { return nil }
            return LiveDocument(key: key, version: row.version, data: data, updatedAt: Timestamp(millisecondsSinceEpoch: row.updatedAt))
        }
        return LiveDocuments(documents: documents, serverTime: horizon)
    }

    /// The user's own feed and their households', or the one household asked for.
    func feeds(userID: String, household: String?) async throws -> [Scope] {
        let households = try await driver.activeHouseholds(userID: userID)
        guard let household else { return [.user(userID)] + households.map(Scope.household) }
        // By bytes, as the databases compare ids: String's == would let another spelling through.
        guard households.contains(where: { $0.sameBytes(as: household) }) else {
            throw ProtocolError(.permissionDenied, "you are not an active member of household '\(household.prefix(128))'")
        }
        return [.household(household)]
    }
}
