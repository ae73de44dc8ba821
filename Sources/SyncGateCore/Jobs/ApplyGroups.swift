import SyncGateWire
/// Which claimed jobs a worker applies together, in one transaction.
///
/// Jobs whose feeds do not overlap can share a transaction: each is decided from its own feeds'
/// rows, which no other job of the transaction reads or writes, so the result is the one each
/// would have had alone; one lock, one load, one write and one commit then serve all of them.
/// Jobs that share a feed (a user's own, a household's) go to different groups, applied one
/// after the other in claim order. A group stops at `jobLimit` jobs or at `operationLimit`
/// operations, so a transaction stays short; a job larger than that is a group of its own.
package struct ApplyGroups: Sendable, Hashable {
    package var jobLimit: Int
    package var operationLimit: Int

    package init(jobLimit: Int = 64, operationLimit: Int = 2_000) {
        self.jobLimit = max(1, jobLimit)
        self.operationLimit = max(1, operationLimit)
    }

    /// One job as grouping sees it: the feeds it writes and its size.
    package struct Member: Sendable, Hashable {
        package var scopes: Set<Scope>
        package var operations: Int

        package init(scopes: Set<Scope>, operations: Int) {
            self.scopes = scopes
            self.operations = operations
        }
    }

    /// The groups, as indices into `members`: every index once, each group in claim order, and
    /// a job after every earlier job it shares a feed with (so jobs of one feed keep their order).
    package func groups(_ members: [Member]) -> [[Int]] {
        var groups: [[Int]] = []
        var scopes: [Set<Scope>] = []
        var sizes: [Int] = []
        for (index, member) in members.enumerated() {
            // The first group that can take it, after the last group it shares a feed with.
            let last = scopes.lastIndex { !$0.isDisjoint(with: member.scopes) } ?? -1
            let fits = groups.indices.dropFirst(last + 1).first { group in
                groups[group].count < jobLimit && sizes[group] + member.operations <= operationLimit
            }
            if let group = fits {
                groups[group].append(index)
                scopes[group].formUnion(member.scopes)
                sizes[group] += member.operations
            } else {
                groups.append([index])
                scopes.append(member.scopes)
                sizes.append(member.operations)
            }
        }
        return groups
    }
}
