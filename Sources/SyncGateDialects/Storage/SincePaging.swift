import SyncGateWire
/// Where a page of changes read by time (`since`, the seed apps' dialects) ends.
///
/// The store reads the changes whose time lies in `(since, horizon]` — a set no later commit can
/// add to (``DialectStore/changesSince(_:)``) — ordered by time, asking for one row more than the
/// page holds. The page may only end between two different times: the next page starts after
/// the time the client is given, so ending inside a run of equal times would skip the rest of it.
package enum SincePaging {
    package enum Cut: Sendable, Hashable {
        /// Every row fits: the page is all of them, and the client's next `since` is the horizon.
        case complete
        /// The page is the first `count` rows; the next `since` is `time`, the last row's time.
        case through(count: Int, time: Int64)
        /// More than a page of rows share the first time: the page is every row of that time,
        /// read again without a limit, and the next `since` is that time.
        case sameTime(Int64)
    }

    /// - Parameters:
    ///   - times: the times of the rows read, ascending; at most `limit + 1` of them.
    ///   - limit: the page size, at least 1.
    package static func cut(times: [Int64], limit: Int) -> Cut {
        guard times.count > limit else { return .complete }
        let first = times[limit]
        // Rows before the first one that does not fit, without its equals.
        var count = limit
        while count > 0, times[count - 1] == first { count -= 1 }
        guard count > 0 else { return .sameTime(first) }
        return .through(count: count, time: times[count - 1])
    }
}
