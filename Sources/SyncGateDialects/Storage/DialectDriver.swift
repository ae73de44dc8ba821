package import SyncGateCore
package import SyncGateStorage

/// What the seed apps' dialects need of a database beyond ``StorageDriver``: reads by commit
/// time, for clients that send back a `since` timestamp instead of a cursor (docs/dialects.md).
/// Both drivers implement it (PostgresDriver+Dialects, SQLiteDriver+Dialects) with their own SQL
/// against the `committed_at` column; the core driver protocol does not carry it.
package protocol DialectDriver: StorageDriver {
    /// The commit-time horizon, in milliseconds since the epoch: the lower of the database's
    /// clock and the claim time of the oldest running job, less one. Every change committed after
    /// this call has a later commit time (an apply's transaction starts after its job's claim).
    func commitHorizon() async throws -> Int64
    /// The commit time of the newest change of each entity that has one.
    func latestCommitTimes(_ entities: [EntityKey]) async throws -> [EntityKey: Int64]
    /// The changes of the reads' feeds whose time — the commit time, raised to the read's
    /// ``TimedRead/visibleFrom`` — lies in `(after, through]`, ordered by that time, scope and
    /// sequence; at most `limit`, in one snapshot.
    func readChanges(_ reads: [TimedRead], after: Int64, through: Int64, types: Set<String>?, limit: Int) async throws -> [TimedChangeRow]
    /// The live entities (tombstones left out) of `scopes`, of `types` when given, in one snapshot.
    func liveEntities(scopes: [Scope], types: Set<String>?) async throws -> [StoredEntityRow]
}

/// One feed of a read by commit time. A household the reader joined later becomes visible to
/// them at the join's commit time: every older change of it counts as made then.
package struct TimedRead: Sendable, Hashable {
    package var scope: Scope
    package var visibleFrom: Int64 = .min
}

/// A change row with its feed and its time (``TimedRead``: the commit time, or the time its feed
/// became visible to the reader, whichever is later).
package struct TimedChangeRow: Sendable, Hashable {
    package var scope: Scope
    package var time: Int64
    package var row: ChangeRow
}

