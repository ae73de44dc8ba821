import Synchronization
import Testing

@testable import SyncGateCore
import SyncGateWire

/// Properties of the conflict policies over seeded random histories: nested documents, timestamp
/// ties, clocks far ahead of the server, items with and without `updatedAt`, and base versions
/// drawn from the entity's actual history. Each property counts the cases it checked.
@Suite(.timeLimit(.minutes(10))) struct PolicyPropertyTests {
    typealias F = Fixture
    static let seeds: [UInt64] = Array(1...400)
    static let fields = ["a", "b", "c", "d"]
    static let checked = Mutex<[String: Int]>([:])

    static func count(_ property: String, _ cases: Int) {
        let total = checked.withLock { counts -> Int in
            counts[property, default: 0] += cases
            return counts.values.reduce(0, +)
        }
        print("policy property '\(property)': \(cases) cases (\(total) in all so far)")
    }

    // MARK: - Generators

    static func value(_ random: inout SeededGenerator, depth: Int = 0) -> JSONValue {
        switch Int.random(in: 0..<7, using: &random) {
        case 0: return .string(["x", "y", "z", ""].randomElement(using: &random)!)
        case 1: return .double(Double(Int.random(in: -50...50, using: &random)) / 4)
        case 2: return .bool(Bool.random(using: &random))
        case 3 where depth < 3: return .object(document(&random, depth: depth + 1))
        case 4 where depth < 3: return .array((0..<Int.random(in: 0...3, using: &random)).map { _ in value(&random, depth: depth + 1) })
        default: return .int(Int64.random(in: 0..<100, using: &random))
        }
    }

    /// A random nested document over a few field names.
    static func document(_ random: inout SeededGenerator, depth: Int = 0) -> JSONObject {
        var document: JSONObject = [:]
        for field in fields where Bool.random(using: &random) { document[field] = value(&random, depth: depth) }
        return document
    }

    /// A patch: some fields set, some removed (`null`).
    static func patch(_ random: inout SeededGenerator) -> JSONObject {
        var patch: JSONObject = [:]
        for field in fields where Bool.random(using: &random) {
            patch[field] = Int.random(in: 0..<5, using: &random) == 0 ? .null : value(&random)
        }
        return patch
    }

    /// Seconds from `Fixture.now`: few distinct values so ties happen, and some beyond the allowed
    /// clock skew (they count as the server's clock).
    static func seconds(_ random: inout SeededGenerator) -> Int64 {
        [-3000, -2000, -2000, -1000, -10, 0, 600, 3600].randomElement(using: &random)!
    }

    /// A base version the client could really hold: the current one, an earlier one, or none.
    static func base(_ random: inout SeededGenerator, history: [Int64]) -> Int64 {
        switch Int.random(in: 0..<10, using: &random) {
        case 0: return 0
        case 1...4: return history.last ?? 0
        default: return history.randomElement(using: &random) ?? 0
        }
    }

    static func later(_ client: Timestamp, than server: Timestamp, ties: EntityTypeConfig.TieBreak) -> Bool {
        client > server || (client == server && ties == .client)
    }

    // MARK: - Every policy

    /// A write based on the version it replaces applies, under every policy: the next version,
    /// with the document the intent describes. (A resolver that keeps or rejects everything fails.)
    @Test(arguments: EntityTypeConfig.Policy.allCases)
    func aWriteBasedOnTheCurrentVersionAlwaysApplies(_ policy: EntityTypeConfig.Policy) {
        var cases = 0
        for seed in Self.seeds {
            var random = SeededGenerator(seed: seed)
            let type = F.type(policy, ties: Bool.random(using: &random) ? .client : .server)
            // No entity yet: a create applies as version 1.
            var state: EntityState? = nil
            let created = F.resolve(F.operation(.create, base: 0, data: Self.document(&random), at: Self.seconds(&random)), state, type)
            #expect(created.written?.version == 1 && created.status == .applied, "seed \(seed)")
            state = created.written
            for index in 0..<12 {
                guard let current = state, !current.isDeleted else { break }
                let intent: SyncOperation.Intent = [.create, .update, .update, .delete].randomElement(using: &random)!
                let data = intent == .create ? Self.document(&random) : Self.patch(&random)
                let operation = F.operation(intent, base: current.version, data: data, at: Self.seconds(&random), key: "k\(index)")
                let decision = F.resolve(operation, current, type)
                cases += 1
                guard let next = decision.written else {
                    Issue.record("seed \(seed): \(intent) at the current version was not written: \(decision)")
                    break
                }
                #expect(decision.status == .applied, "seed \(seed)")
                #expect(next.version == current.version + 1, "seed \(seed)")
                switch intent {
                case .delete: #expect(next.isDeleted, "seed \(seed)")
                case .create: if policy != .itemsMerge { #expect(next.data == data, "seed \(seed)") }
                case .update: #expect(next.data == (current.data ?? [:]).patched(with: data), "seed \(seed)")
                }
                state = next
            }
        }
        Self.count("current base applies (\(policy.rawValue))", cases)
    }

    // MARK: - lww

    /// `lww`: a stale write applies exactly when its timestamp (clamped to the server's clock) is
    /// later than the stored one (ties as configured); the stored timestamp never goes back, so a
    /// newer write is never lost to an older one. Deletes win against later writes.
    @Test func lastWriteWinsNeverLosesANewerWrite() {
        var cases = 0
        for seed in Self.seeds {
            var random = SeededGenerator(seed: seed)
            let ties: EntityTypeConfig.TieBreak = Bool.random(using: &random) ? .client : .server
            let type = F.type(.lww, ties: ties)
            var state = F.resolve(F.operation(.create, base: 0, data: Self.document(&random), at: Self.seconds(&random)), nil, type).written!
            var history: [Int64] = [1]
            for index in 0..<15 {
                let intent: SyncOperation.Intent = [.create, .update, .update, .update, .delete].randomElement(using: &random)!
                let data = intent == .create ? Self.document(&random) : Self.patch(&random)
                let base = Self.base(&random, history: history)
                let operation = F.operation(intent, base: base, data: data, at: Self.seconds(&random), key: "k\(index)")
                let clamped = ConflictResolver.effectiveTimestamp(operation.clientTimestamp, now: F.now)
                let decision = F.resolve(operation, state, type)
                cases += 1
                if state.isDeleted {
                    #expect(decision.status == .conflict(.serverWins) && decision.written == nil, "seed \(seed): a tombstone wins")
                } else if base < state.version {
                    let wins = Self.later(clamped, than: state.clientTimestamp, ties: ties)
                    #expect((decision.written != nil) == wins, "seed \(seed) op \(index): stale write at \(clamped) against \(state.clientTimestamp)")
                    #expect(decision.status == (wins ? .conflict(.clientWins) : .conflict(.serverWins)), "seed \(seed)")
                }
                if let next = decision.written {
                    if base < state.version { #expect(next.clientTimestamp >= state.clientTimestamp, "seed \(seed): the stored timestamp went back") }
                    #expect(next.clientTimestamp == clamped)
                    state = next
                    history.append(next.version)
                }
            }
        }
        Self.count("lww never loses a newer write", cases)
    }

    // MARK: - field_merge

    /// `field_merge`: from any base the client really held, every patched field that did not change
    /// after that base applies; one that did applies only with a later timestamp; fields the patch
    /// does not name never change.
    @Test func fieldMergeKeepsEveryNonConflictingField() {
        var cases = 0
        for seed in Self.seeds {
            var random = SeededGenerator(seed: seed)
            let ties: EntityTypeConfig.TieBreak = Bool.random(using: &random) ? .client : .server
            let type = F.type(.fieldMerge, ties: ties)
            var state = F.resolve(F.operation(.create, base: 0, data: Self.document(&random), at: Self.seconds(&random)), nil, type).written!
            var history: [Int64] = [1]
            for index in 0..<15 {
                let patch = Self.patch(&random)
                let base = Self.base(&random, history: history)
                let operation = F.operation(.update, base: base, data: patch, at: Self.seconds(&random), key: "k\(index)")
                let clamped = ConflictResolver.effectiveTimestamp(operation.clientTimestamp, now: F.now)
                let decision = F.resolve(operation, state, type)
                cases += 1
                let after = decision.written?.data ?? state.data ?? [:]
                if base < state.version {
                    var conflicted = false
                    for (field, patched) in patch {
                        let unstamped = state.data?[field] == nil ? nil : FieldStamp(version: state.version, timestamp: state.clientTimestamp)
                        let stamp = state.meta.fields[field] ?? unstamped
                        let changedSinceBase = (stamp?.version ?? 0) > base
                        conflicted = conflicted || changedSinceBase
                        let applies = !changedSinceBase || Self.later(clamped, than: stamp!.timestamp, ties: ties)
                        let expected: JSONValue? = applies ? (patched.isNull ? Optional<JSONValue>.none : patched) : state.data?[field]
                        #expect(after[field] == expected, "seed \(seed) op \(index) field \(field): changed since base \(base): \(changedSinceBase)")
                    }
                    if conflicted { #expect(decision.status == .conflict(.merged), "seed \(seed)") }
                }
                for field in Self.fields where patch[field] == nil {
                    #expect(after[field] == state.data?[field], "seed \(seed) op \(index): untouched field \(field) changed")
                }
                if let next = decision.written {
                    #expect(next.version == state.version + 1)
                    state = next
                    history.append(next.version)
                }
            }
        }
        Self.count("field_merge keeps non-conflicting fields", cases)
    }

    // MARK: - Convergence

    /// Devices writing whole documents with distinct timestamps converge under `lww`, whatever order
    /// their pushes arrive in: the latest write is the document.
    @Test func lastWriteWinsConvergesInAnyArrivalOrder() {
        var cases = 0
        for seed in Self.seeds {
            var random = SeededGenerator(seed: seed)
            let created = F.entity(version: 1, data: Self.document(&random), at: -7200)
            var writes: [SyncOperation] = []
            for index in Int64(0)..<Int64.random(in: 2...7, using: &random) {
                var document = Self.document(&random)
                for field in Self.fields where document[field] == nil { document[field] = .null }
                writes.append(F.operation(.update, base: 1, data: document, at: index * 60 - 3000, key: "k\(index)"))
            }
            let latest = writes.max { $0.clientTimestamp < $1.clientTimestamp }!
            let expected = JSONObject().patched(with: latest.data!)
            for _ in 0..<4 {
                writes.shuffle(using: &random)
                var state: EntityState? = created
                for operation in writes {
                    if let written = F.resolve(operation, state, F.type(.lww)).written { state = written }
                }
                #expect(state?.data == expected, "seed \(seed)")
                cases += 1
            }
        }
        Self.count("lww converges", cases)
    }

    /// `field_merge`: concurrent single-field edits from one base converge field by field on the
    /// latest timestamp, in any arrival order; edits of different fields never conflict.
    @Test func fieldMergeConvergesFieldByField() {
        var cases = 0
        for seed in Self.seeds {
            var random = SeededGenerator(seed: seed)
            var stamps: [String: FieldStamp] = [:]
            for field in Self.fields { stamps[field] = FieldStamp(version: 1, timestamp: F.at(-7200)) }
            let base = F.entity(version: 1, data: ["a": 0, "b": 0, "c": 0, "d": 0], at: -7200, meta: EntityMeta(fields: stamps))
            var edits: [SyncOperation] = []
            var latest: [String: (Int64, JSONValue)] = [:]
            for index in 0..<Int.random(in: 2...8, using: &random) {
                let field = Self.fields.randomElement(using: &random)!
                let seconds = Int64(index * 10 - 3000)
                let value = Self.value(&random)
                if (latest[field]?.0 ?? .min) < seconds { latest[field] = (seconds, value) }
                edits.append(F.operation(.update, base: 1, data: [field: value], at: seconds, key: "k\(index)"))
            }
            for _ in 0..<4 {
                edits.shuffle(using: &random)
                var state: EntityState? = base
                for operation in edits {
                    if let written = F.resolve(operation, state, F.type(.fieldMerge)).written { state = written }
                }
                for field in Self.fields {
                    #expect(state?.data?[field] == (latest[field]?.1 ?? .int(0)), "seed \(seed) field \(field)")
                }
                cases += 1
            }
        }
        Self.count("field_merge converges", cases)
    }

    /// `items_merge`: edits of items (with or without `updatedAt`, some deleting) converge in any
    /// arrival order: an item is the copy written last, and gone when deleted after it.
    @Test func itemsMergeConvergesItemByItem() {
        let type = EntityTypeConfig(name: "notes", policy: .itemsMerge)
        var cases = 0
        for seed in Self.seeds {
            var random = SeededGenerator(seed: seed)
            var writes: [SyncOperation] = []
            // Per item: the latest live copy and the latest deletion, by effective time.
            var live: [String: (Int64, JSONValue)] = [:]
            var deleted: [String: Int64] = [:]
            var used: Set<Int64> = []
            for index in 0..<Int.random(in: 2...8, using: &random) {
                var items: [JSONValue] = []
                let operationSeconds = Int64(index * 100 - 3000)
                for id in ["x", "y", "z"].shuffled(using: &random).prefix(Int.random(in: 1...2, using: &random)) {
                    // Distinct effective times, so order alone cannot decide.
                    var seconds = operationSeconds + Int64.random(in: 1...90, using: &random)
                    while used.contains(seconds) { seconds += 1 }
                    used.insert(seconds)
                    var item: JSONObject = ["id": .string(id), "v": .int(Int64(index))]
                    let withTime = Bool.random(using: &random)
                    let effective = withTime ? seconds : operationSeconds
                    if withTime { item["updatedAt"] = .string(F.at(seconds).rfc3339) }
                    if Int.random(in: 0..<4, using: &random) == 0 {
                        item["deletedAt"] = .string(F.at(effective).rfc3339)
                        deleted[id] = max(deleted[id] ?? .min, effective)
                    } else if (live[id]?.0 ?? .min) < effective {
                        live[id] = (effective, .object(item))
                    }
                    items.append(.object(item))
                }
                writes.append(F.operation(.update, base: 1, data: ["items": .array(items)], at: operationSeconds, key: "k\(index)"))
            }
            let expected = live.filter { id, copy in copy.0 > (deleted[id] ?? .min) }.mapValues(\.1)
            for _ in 0..<4 {
                writes.shuffle(using: &random)
                var state: EntityState? = F.entity(version: 1, data: ["items": []], at: -7200)
                for operation in writes {
                    if let written = F.resolve(operation, state, type).written { state = written }
                }
                let final = Dictionary(uniqueKeysWithValues: (state?.data?["items"]?.arrayValue ?? []).map { ($0["id"]!.stringValue!, $0) })
                #expect(final == expected, "seed \(seed)")
                cases += 1
            }
        }
        Self.count("items_merge converges", cases)
    }
}
