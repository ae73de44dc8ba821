package import SyncGateCore
import SyncGateWire

extension SyncStore {
    /// A page of the user's feeds, from two reads:
    ///
    /// 1. the context (households, resync epoch, watermark, feed heads and floors), which the
    ///    ``PullPlanner`` turns into feed reads or a cursor error;
    /// 2. the planned reads, with the floors as of that read: a purge that raised a floor past a
    ///    resumed position (and past the floor the reader began under) in between may have
    ///    removed a tombstone the client has not seen, so that cursor is refused too.
    package func pull(_ query: PullQuery) async throws -> PullResult {
        let extra = query.cursor.map { Array($0.positions.keys) } ?? []
        let context = try await driver.pullContext(userID: query.userID, deviceID: query.deviceID, extraScopes: extra)
        let plan = try PullPlanner.plan(
            query, households: context.households, resyncEpoch: context.resyncEpoch, feeds: context.feeds, scopesVersion: context.scopesVersion
        )
        var pages: [Scope: [FeedChange]] = [:]
        var floors: [Scope: Int64] = [:]
        if !plan.forceResync, !plan.reads.isEmpty {
            let page = try await driver.readChanges(plan.reads, types: query.entityTypes, limit: query.limit)
            for read in plan.reads where read.isExpired(byFloor: page.floors[read.scope] ?? 0) {
                throw CursorError.expired(read.scope)
            }
            floors = page.floors
            for (scope, rows) in page.rows {
                pages[scope] = try rows.map { row throws(StoredDataError) in try FeedChange(scope: scope, row: row) }
            }
        }
        return plan.assemble(pages: pages, floors: floors, deviceWatermark: context.deviceWatermark)
    }

    package func readableScopes(userID: String) async throws -> [Scope] {
        [.user(userID)] + (try await driver.activeHouseholds(userID: userID)).map(Scope.household)
    }

    package func watchState(feeds: [Scope], users: [String]) async throws -> WatchState {
        return try await driver.watchState(feeds: feeds, users: users)
    }

    package func readFeeds(_ requests: [FeedReadRequest]) async throws -> [FeedSlice] {
        guard !requests.isEmpty else { return [] }
        let read = try await driver.readFeeds(requests)
        return try zip(requests, read).map { request, feed in
            FeedSlice(changes: try feed.rows.map { row throws(StoredDataError) in try FeedChange(scope: request.scope, row: row) }, floor: feed.floor)
        }
    }
}
