import SyncGateWire
/// Appending entity states to their feeds: each state becomes the next change of its scope's feed.
///
/// Sequence numbers continue from the feed heads read under the feeds' row locks, so within a
/// feed commit order equals sequence order (DESIGN.md, invariant 3).
package enum FeedAppend {
    /// The sequence number of each state, in order; `heads` end at the last number used per feed.
    /// A feed whose head is at the top of the range (only a corrupted or hostile row gets there)
    /// fails the job for good rather than trapping the process.
    package static func sequences(for states: [EntityState], heads: inout [Scope: Int64]) throws(FeedExhausted) -> [Int64] {
        var sequences: [Int64] = []
        sequences.reserveCapacity(states.count)
        for state in states {
            let (next, overflow) = (heads[state.key.scope] ?? 0).addingReportingOverflow(1)
            if overflow { throw FeedExhausted(scope: state.key.scope) }
            heads[state.key.scope] = next
            sequences.append(next)
        }
        return sequences
    }
}

/// A feed has used every sequence number: retrying cannot help.
package struct FeedExhausted: Error, PermanentFailure, CustomStringConvertible {
    package var scope: Scope
    package var description: String { "feed \(scope.key) has used every sequence number" }
}
