/// Appending entity states to their feeds: each state becomes the next change of its scope's feed.
///
/// Sequence numbers continue from the feed heads read under the feeds' row locks, so within a
/// feed commit order equals sequence order (DESIGN.md, invariant 3).
public enum FeedAppend {
    /// The sequence number of each state, in order; `heads` end at the last number used per feed.
    public static func sequences(for states: [EntityState], heads: inout [Scope: Int64]) -> [Int64] {
        states.map { state in
            let next = (heads[state.key.scope] ?? 0) + 1
            heads[state.key.scope] = next
            return next
        }
    }
}
