import SyncGateWire
/// Whether a pull answered by a hot standby may go to the client, or the primary must answer.
///
/// A standby replays the primary's WAL a little behind it. Its pages never move a cursor
/// backwards (a position only passes a head the standby has replayed, and a cursor ahead of
/// the standby is refused), so most answers are as good as the primary's, only older. Two are
/// not:
/// - a cursor error: the cursor may hold a position or a resync epoch the standby has not
///   replayed yet (`ahead`), which is no reason to make the client start over; the primary
///   decides whether the cursor is invalid;
/// - a change of households: the standby may not have replayed the membership the cursor was
///   built under. `scopes.removed` would make the client delete a household it still belongs
///   to; `scopes.added` to a cursor would send a member the primary has already removed (the
///   cursor, issued after the leave, no longer holds it) that household's whole feed again. A
///   bootstrap (no cursor) lists every household as added: it stays on the standby, which is
///   what standbys are for.
package enum ReplicaVerdict: Sendable, Hashable {
    /// Give the client the standby's page.
    case answer
    /// Ask the primary instead.
    case askPrimary(Reason)

    package enum Reason: String, Sendable, Hashable {
        /// The standby may not have replayed what the cursor has seen.
        case behind
        /// The standby failed (unreachable, timed out, in trouble).
        case failed
    }

    package static func of(_ result: Result<PullResult, any Error>, bootstrap: Bool = false) -> ReplicaVerdict {
        switch result {
        case .success(let page):
            return page.scopesRemoved.isEmpty && (bootstrap || page.scopesAdded.isEmpty) ? .answer : .askPrimary(.behind)
        case .failure(is CursorError):
            return .askPrimary(.behind)
        case .failure:
            return .askPrimary(.failed)
        }
    }
}

extension PullResult {
    /// Whether this complete page stops short of a head known to be committed (`heads`, from the
    /// primary's notifications): a standby's page read before it replayed that change. A page
    /// with more to read, or one asking for a resync, is never behind.
    package func isBehind(_ heads: [Scope: Int64]) -> Bool {
        guard !hasMore, !forceResync else { return false }
        return cursor.positions.contains { scope, position in position < heads[scope, default: 0] }
    }
}
