import SyncGateWire
/// Turns a pull request into feed reads and the reads into a page: the cursor rules of PROTOCOL.md,
/// free of I/O so both drivers serve cursors identically.
///
/// The store:
/// 1. reads the user's active households, the resync epoch, and the head and floor of each feed;
/// 2. calls ``plan(_:households:resyncEpoch:feeds:)``;
/// 3. reads each planned feed in order after ``PullPlan/FeedRead/after``, with a limit of the
///    remaining page size plus one, stopping once the page is full;
/// 4. calls ``PullPlan/assemble(pages:floors:deviceWatermark:)`` with the rows and the floors as of that read.
package enum PullPlanner {
    package static func plan(
        _ query: PullQuery,
        households: [String],
        resyncEpoch: Int64,
        feeds: [Scope: FeedInfo],
        scopesVersion: Int64 = 0
    ) throws(CursorError) -> PullPlan {
        let userScope = Scope.user(query.userID)
        // As scopes: ids compare by bytes (a `Set<String>` would fold NFC and NFD spellings).
        let readable = [userScope] + Set(households.map(Scope.household)).sorted()

        guard let cursor = query.cursor else {
            // Bootstrap: every feed from its beginning, every household announced.
            return PullPlan(
                query: query,
                resyncEpoch: resyncEpoch,
                feeds: feeds,
                reads: readable.map { PullPlan.FeedRead(scope: $0, after: 0, resumes: false, through: feeds[$0]?.head ?? 0) },
                added: readable.compactMap(\.householdID),
                removed: [],
                forceResync: false,
                scopesVersion: scopesVersion
            )
        }
        if cursor.resyncEpoch < resyncEpoch {
            return PullPlan(query: query, resyncEpoch: resyncEpoch, feeds: feeds, reads: [], added: [], removed: [], forceResync: true, scopesVersion: scopesVersion)
        }
        guard cursor.resyncEpoch == resyncEpoch else {
            throw .malformed("cursor comes from a newer resync epoch than the server's")
        }

        var reads: [PullPlan.FeedRead] = []
        var added: [String] = []
        for scope in readable {
            // A feed without a row has had no change (its row comes with its first).
            let head = feeds[scope]?.head ?? 0
            guard let position = cursor.positions[scope] else {
                // Joined since the cursor was issued: read it from the beginning.
                reads.append(.init(scope: scope, after: 0, resumes: false, through: head))
                if let household = scope.householdID { added.append(household) }
                continue
            }
            let feed = feeds[scope] ?? FeedInfo(head: 0, floor: 0)
            guard position <= feed.head else { throw .ahead(scope) }
            // At 0 the reader has read nothing of this feed yet (a bootstrap, or a newly joined
            // household, whose pages filled up before reaching it): it holds nothing a purge
            // could have deleted, so it reads what is left, as a bootstrap does.
            guard position > 0 else {
                reads.append(.init(scope: scope, after: 0, resumes: false, through: head))
                continue
            }
            // Tombstones up to the floor were purged: a reader behind it may have missed a delete,
            // unless the floor was already there when it read the feed (a bootstrap paging
            // through a feed purged before it began).
            let seen = cursor.floors[scope] ?? 0
            guard position >= feed.floor || feed.floor <= seen else { throw .expired(scope) }
            reads.append(.init(scope: scope, after: position, resumes: true, floorSeen: seen, through: head))
        }
        let removed = cursor.positions.keys.filter { !readable.contains($0) }.compactMap(\.householdID).sorted()
        return PullPlan(
            query: query, resyncEpoch: resyncEpoch, feeds: feeds, reads: reads, added: added, removed: removed, forceResync: false,
            scopesVersion: scopesVersion
        )
    }

    /// The plan of a waiting pull whose only news is that feeds it reads advanced: every feed of
    /// `cursor` is read after its position (the user's first, then the rest in order), with
    /// `heads` the newest known head of each. Pages only for the advanced feeds; every other
    /// feed's page is empty and its position stays.
    package static func continuing(_ query: PullQuery, cursor: SyncCursor, heads: [Scope: Int64], scopesVersion: Int64) -> PullPlan {
        let user = Scope.user(query.userID)
        let order = [user] + cursor.positions.keys.filter { $0 != user }.sorted()
        var feeds: [Scope: FeedInfo] = [:]
        var reads: [PullPlan.FeedRead] = []
        for scope in order {
            let position = cursor.positions[scope] ?? 0
            feeds[scope] = FeedInfo(head: max(position, heads[scope] ?? position), floor: 0)
            reads.append(.init(scope: scope, after: position, resumes: true))
        }
        return PullPlan(
            query: query, resyncEpoch: cursor.resyncEpoch, feeds: feeds, reads: reads, added: [], removed: [], forceResync: false,
            scopesVersion: scopesVersion
        )
    }
}

/// A feed's newest sequence number and its purge floor.
package struct FeedInfo: Sendable, Hashable {
    package var head: Int64
    package var floor: Int64

    package init(head: Int64, floor: Int64) {
        self.head = head
        self.floor = floor
    }
}

package struct PullPlan: Sendable {
    package struct FeedRead: Sendable, Hashable {
        package var scope: Scope
        /// Read changes with a sequence number greater than this.
        package var after: Int64
        /// It continues from a position the client holds, so the feed's floor must not pass it
        /// (a bootstrap or a newly joined household starts from nothing and sees what is left).
        package var resumes: Bool
        /// The floor the reader was already consistent with (``SyncCursor/floors``): a floor
        /// up to it does not expire the position.
        package var floorSeen: Int64
        /// Read no change past this sequence number: the feed's head in the context the plan was
        /// made from (`nil`: no bound). The context holds the memberships the plan trusts; a
        /// change committed after it (after a removal, say) waits for the next pull, whose
        /// context sees the removal too.
        package var through: Int64?

        package init(scope: Scope, after: Int64, resumes: Bool, floorSeen: Int64 = 0, through: Int64? = nil) {
            self.scope = scope
            self.after = after
            self.resumes = resumes
            self.floorSeen = floorSeen
            self.through = through
        }

        /// Whether a purge that left the feed's floor at `floor` may have removed a delete this
        /// reader has not seen.
        package func isExpired(byFloor floor: Int64) -> Bool {
            resumes && floor > after && floor > floorSeen
        }
    }

    package var query: PullQuery
    package var resyncEpoch: Int64
    package var feeds: [Scope: FeedInfo]
    /// Feeds to read, in order.
    package var reads: [FeedRead]
    package var added: [String]
    package var removed: [String]
    package var forceResync: Bool
    /// The user's scopes version the plan was made under.
    package var scopesVersion: Int64

    /// Builds the page from the rows read per feed and the floors as of that read. Feeds without
    /// an entry in `pages` were not read because the page was already full.
    package func assemble(pages: [Scope: [FeedChange]], floors: [Scope: Int64] = [:], deviceWatermark: Int64) -> PullResult {
        if forceResync, let cursor = query.cursor {
            return PullResult(
                changes: [], cursor: cursor, hasMore: false, forceResync: true, scopesAdded: [], scopesRemoved: [],
                deviceWatermark: deviceWatermark, scopesVersion: scopesVersion
            )
        }
        var changes: [FeedChange] = []
        var positions: [Scope: Int64] = [:]
        var floorsSeen: [Scope: Int64] = [:]
        var hasMore = false
        var remaining = query.limit
        for read in reads {
            let head = feeds[read.scope]?.head ?? 0
            guard let rows = pages[read.scope] else {
                positions[read.scope] = read.after
                floorsSeen[read.scope] = read.floorSeen
                if head > read.after { hasMore = true }
                continue
            }
            // The rows were read under this floor (a purge past the position would have failed
            // the read), so the new position is consistent with it.
            floorsSeen[read.scope] = max(read.floorSeen, floors[read.scope] ?? 0)
            let taken = rows.prefix(remaining)
            remaining -= taken.count
            changes.append(contentsOf: taken)
            if rows.count > taken.count {
                hasMore = true
                positions[read.scope] = taken.last?.sequence ?? read.after
            } else {
                // Every matching row was returned: skip past filtered-out rows up to the head, and
                // past rows committed since the head was read.
                positions[read.scope] = max(read.after, head, taken.last?.sequence ?? 0)
            }
        }
        return PullResult(
            changes: changes,
            cursor: SyncCursor(userID: query.userID, resyncEpoch: resyncEpoch, positions: positions, floors: floorsSeen),
            hasMore: hasMore,
            forceResync: false,
            scopesAdded: added,
            scopesRemoved: removed,
            deviceWatermark: deviceWatermark,
            scopesVersion: scopesVersion
        )
    }
}
