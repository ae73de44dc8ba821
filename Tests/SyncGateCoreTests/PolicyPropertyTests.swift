import Testing

@testable import SyncGateCore

/// Properties of the conflict policies over random operation histories.
@Suite struct PolicyPropertyTests {
    typealias F = Fixture
    static let seeds: [UInt64] = Array(1...200)
    static let fields = ["a", "b", "c", "d"]

    /// A random history against one entity: random intents, base versions (current, stale or
    /// ahead), timestamps (some far in the future) and patches.
    static func history(_ random: inout SeededGenerator, length: Int) -> [SyncOperation] {
        (0..<length).map { index in
            let intent: SyncOperation.Intent = [.create, .update, .update, .update, .delete].randomElement(using: &random)!
            var data: JSONObject = [:]
            for field in fields where Bool.random(using: &random) {
                data[field] = Int.random(in: 0..<5, using: &random) == 0 ? .null : .int(Int64.random(in: 0..<100, using: &random))
            }
            let seconds = Int64.random(in: -3600...600, using: &random)
            return F.operation(intent, base: Int64.random(in: 0...Int64(index + 1), using: &random), data: data, at: seconds, key: "k\(index)")
        }
    }

    /// Applies a history to one entity, returning every decision and the final state.
    static func replay(_ history: [SyncOperation], type: EntityTypeConfig) -> ([PolicyDecision], EntityState?) {
        var state: EntityState?
        var decisions: [PolicyDecision] = []
        for operation in history {
            let decision = F.resolve(operation, state, type)
            decisions.append(decision)
            if let written = decision.written { state = written }
        }
        return (decisions, state)
    }

    @Test(arguments: EntityTypeConfig.Policy.allCases)
    func theSameHistoryAlwaysGivesTheSameState(_ policy: EntityTypeConfig.Policy) {
        for seed in Self.seeds {
            var random = SeededGenerator(seed: seed)
            let history = Self.history(&random, length: 12)
            let first = Self.replay(history, type: F.type(policy))
            let second = Self.replay(history, type: F.type(policy))
            #expect(first.0 == second.0, "seed \(seed)")
            #expect(first.1 == second.1, "seed \(seed)")
        }
    }

    /// No policy loses a write that won: every write is the next version, carries the winning
    /// operation's patch, and nothing changes without a write.
    @Test(arguments: EntityTypeConfig.Policy.allCases)
    func writesThatWinAreKeptAndNothingElseChanges(_ policy: EntityTypeConfig.Policy) {
        for seed in Self.seeds {
            var random = SeededGenerator(seed: seed)
            var state: EntityState?
            for operation in Self.history(&random, length: 15) {
                let decision = F.resolve(operation, state, F.type(policy))
                switch decision {
                case .write(let next, let status):
                    #expect(next.version == (state?.version ?? 0) + 1, "seed \(seed)")
                    if operation.intent == .delete {
                        #expect(next.isDeleted, "seed \(seed)")
                    } else if status != .conflict(.merged) {
                        // A winning create or update: each patched field holds the pushed value.
                        for (field, value) in operation.data ?? [:] {
                            // A null in an update removes the field; a create stores the document as given.
                            // (`.none`, not `nil`: JSONValue is ExpressibleByNilLiteral.)
                            let expected: JSONValue? = value.isNull && operation.intent == .update ? .none : .some(value)
                            #expect(next.data?[field] == expected, "seed \(seed) field \(field)")
                        }
                    }
                    state = next
                case .keep(let status):
                    // Keeping the stored state is a conflict answer, or an empty field_merge patch.
                    let emptyMerge = policy == .fieldMerge && status == .applied && (operation.data ?? [:]).isEmpty
                    #expect(status == .conflict(.serverWins) || status == .conflict(.merged) || emptyMerge, "seed \(seed)")
                case .reject(let code, _):
                    #expect(code == .validationError || code == .entityNotFound, "seed \(seed)")
                }
            }
        }
    }

    /// `lww`: stale overwrites converge on the latest timestamp whatever order they arrive in.
    @Test func lastWriteWinsConvergesRegardlessOfArrivalOrder() {
        for seed in Self.seeds {
            var random = SeededGenerator(seed: seed)
            let created = F.entity(version: 1, data: ["a": 0, "b": 0], at: -7200)
            var writes: [SyncOperation] = []
            for index in Int64(0)..<6 {
                let data: JSONObject = ["a": .int(index), "b": .int(index * 10)]
                writes.append(F.operation(.update, base: 0, data: data, at: index * 60 - 3000, key: "k\(index)"))
            }
            let latest = writes.max { $0.clientTimestamp < $1.clientTimestamp }!
            writes.shuffle(using: &random)
            var state: EntityState? = created
            for operation in writes {
                if let written = F.resolve(operation, state, F.type(.lww)).written { state = written }
            }
            #expect(state?.data == latest.data, "seed \(seed)")
        }
    }

    /// `field_merge`: clients editing different fields from the same base never lose either edit.
    @Test func fieldMergeOfDisjointFieldsKeepsEveryEdit() {
        for seed in Self.seeds {
            var random = SeededGenerator(seed: seed)
            var stamps: [String: FieldStamp] = [:]
            for field in Self.fields { stamps[field] = FieldStamp(version: 3, timestamp: F.at(-7200)) }
            let base = F.entity(version: 3, data: ["a": 0, "b": 0, "c": 0, "d": 0], at: -7200, meta: EntityMeta(fields: stamps))
            var edits = Self.fields.enumerated().map { index, field in
                F.operation(.update, base: 3, data: [field: .int(Int64(100 + index))], at: Int64.random(in: -3600...0, using: &random), key: field)
            }
            edits.shuffle(using: &random)
            var state: EntityState? = base
            for operation in edits {
                let decision = F.resolve(operation, state, F.type(.fieldMerge))
                #expect(decision.status == .applied, "seed \(seed): disjoint edits never conflict")
                if let written = decision.written { state = written }
            }
            #expect(state?.data == ["a": 100, "b": 101, "c": 102, "d": 103], "seed \(seed)")
            #expect(state?.version == 7)
        }
    }

    /// `items_merge`: per item, the copy with the latest updatedAt survives any arrival order.
    @Test func itemsMergeConvergesPerItem() {
        let type = EntityTypeConfig(name: "notes", policy: .itemsMerge)
        for seed in Self.seeds {
            var random = SeededGenerator(seed: seed)
            var writes: [SyncOperation] = []
            var newest: [String: (Int64, JSONValue)] = [:]
            for index in 0..<8 {
                let id = ["x", "y", "z"].randomElement(using: &random)!
                let updated = Int64(index * 10) - 3000
                let item: JSONValue = ["id": .string(id), "v": .int(Int64(index)), "updatedAt": .string(F.at(updated).rfc3339)]
                if (newest[id]?.0 ?? .min) < updated { newest[id] = (updated, item) }
                writes.append(F.operation(.update, base: 0, data: ["items": [item]], at: Int64.random(in: -3600...0, using: &random), key: "k\(index)"))
            }
            writes.shuffle(using: &random)
            var state: EntityState? = F.entity(version: 1, data: ["items": []], at: -7200)
            for operation in writes {
                if let written = F.resolve(operation, state, type).written { state = written }
            }
            let final = Dictionary(uniqueKeysWithValues: (state?.data?["items"]?.arrayValue ?? []).map { ($0["id"]!.stringValue!, $0) })
            #expect(final == newest.mapValues(\.1), "seed \(seed)")
        }
    }
}
