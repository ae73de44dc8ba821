import SyncGateCore
import SyncGateWire
import Testing

/// Which claimed jobs share a transaction: only jobs whose feeds do not overlap, every job once,
/// jobs of one feed in claim order, within the limits.
@Suite struct ApplyGroupsTests {
    static func member(_ scopes: [String], _ operations: Int = 10) -> ApplyGroups.Member {
        ApplyGroups.Member(scopes: Set(scopes.map { $0.hasPrefix("h") ? Scope.household($0) : Scope.user($0) }), operations: operations)
    }

    @Test func jobsThatShareNoFeedGoTogether() {
        let groups = ApplyGroups().groups([Self.member(["a"]), Self.member(["b"]), Self.member(["c", "h1"]), Self.member(["d"])])
        #expect(groups == [[0, 1, 2, 3]])
    }

    @Test func aJobGoesAfterEveryEarlierJobItSharesAFeedWith() {
        // b and c write household h1; d shares nothing and joins the first group.
        let groups = ApplyGroups().groups([
            Self.member(["a"]), Self.member(["b", "h1"]), Self.member(["c", "h1"]), Self.member(["d"]), Self.member(["e", "h1"]),
        ])
        #expect(groups == [[0, 1, 3], [2], [4]])
    }

    @Test func aJobSharingOnlyWithALaterGroupGoesAfterThatGroup() {
        // b waits for a (h1); d shares with both groups; b's next job shares only with group 1.
        let groups = ApplyGroups().groups([
            Self.member(["a", "h1"]), Self.member(["b", "h1"]), Self.member(["c", "h2"]), Self.member(["d", "h1", "h2"]),
            Self.member(["e", "h3"]), Self.member(["b"]),
        ])
        #expect(groups == [[0, 2, 4], [1], [3, 5]])
    }

    @Test func groupsStopAtTheJobAndOperationLimits() {
        let byJobs = ApplyGroups(jobLimit: 2, operationLimit: 1000).groups((0..<5).map { Self.member(["u\($0)"]) })
        #expect(byJobs == [[0, 1], [2, 3], [4]])
        let byOperations = ApplyGroups(jobLimit: 10, operationLimit: 25).groups((0..<5).map { Self.member(["u\($0)"]) })
        #expect(byOperations == [[0, 1], [2, 3], [4]])
        // A job larger than the limit is a group of its own.
        let large = ApplyGroups(jobLimit: 10, operationLimit: 25).groups([Self.member(["a"]), Self.member(["b"], 1000), Self.member(["c"])])
        #expect(large == [[0, 2], [1]])
    }

    @Test func limitsBelowOneMeanOneJobPerGroup() {
        #expect(ApplyGroups(jobLimit: 0, operationLimit: 0).groups([Self.member(["a"]), Self.member(["b"])]) == [[0], [1]])
        #expect(ApplyGroups().groups([]) == [])
    }

    /// The rules on random claims: every job once; no two jobs of a group share a feed; a job
    /// comes after every earlier job it shares a feed with; limits hold (a group of one aside).
    @Test(arguments: 0..<400)
    func randomClaimsKeepEveryRule(_ seed: Int) {
        var random = SplitMix(seed: UInt64(seed))
        let users = ["a", "b", "c", "d", "e", "f", "g", "h"]
        let households = ["h1", "h2", "h3"]
        let members = (0..<Int(random.next() % 24)).map { _ -> ApplyGroups.Member in
            var scopes = [users[Int(random.next() % UInt64(users.count))]]
            for household in households where random.next() % 4 == 0 { scopes.append(household) }
            return Self.member(scopes, Int(random.next() % 40) + 1)
        }
        let rules = ApplyGroups(jobLimit: Int(random.next() % 6) + 1, operationLimit: Int(random.next() % 100) + 1)
        let groups = rules.groups(members)
        #expect(groups.flatMap { $0 }.sorted() == Array(members.indices))
        var groupOf: [Int: Int] = [:]
        for (group, indices) in groups.enumerated() {
            #expect(indices == indices.sorted())
            for index in indices { groupOf[index] = group }
            for (position, index) in indices.enumerated() {
                for other in indices[(position + 1)...] { #expect(members[index].scopes.isDisjoint(with: members[other].scopes)) }
            }
            if indices.count > 1 {
                #expect(indices.count <= rules.jobLimit)
                #expect(indices.reduce(0) { $0 + members[$1].operations } <= rules.operationLimit)
            }
        }
        for earlier in members.indices {
            for later in members.indices where later > earlier && !members[earlier].scopes.isDisjoint(with: members[later].scopes) {
                #expect(groupOf[earlier]! < groupOf[later]!, "job \(later) shares a feed with job \(earlier) but is not after it: \(groups)")
            }
        }
    }
}

/// A small deterministic generator for the property tests (SplitMix64).
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
