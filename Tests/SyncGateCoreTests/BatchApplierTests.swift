import Testing

@testable import SyncGateCore
import SyncGateWire

@Suite(.timeLimit(.minutes(10))) struct BatchApplierTests {
    typealias F = Fixture
    static let alice = BatchApplier(userID: "alice", collections: .default, now: F.now)
    static let bob = BatchApplier(userID: "bob", collections: .default, now: F.now)

    static func op(
        _ intent: SyncOperation.Intent,
        _ type: String,
        _ id: String,
        base: Int64 = 0,
        data: JSONObject? = [:],
        household: String? = nil,
        key: String? = nil
    ) -> SyncOperation {
        SyncOperation(
            idempotencyKey: key ?? "\(intent)-\(type)-\(id)-\(base)",
            entityType: type,
            entityID: id,
            intent: intent,
            baseVersion: base,
            data: intent == .delete ? nil : data,
            clientTimestamp: F.now,
            householdID: household
        )
    }

    static func statusCodes(_ outcome: BatchOutcome) -> [String] {
        outcome.results.map { result in
            switch result.status {
            case .applied: return "applied"
            case .duplicate: return "duplicate"
            case .conflict(let resolution): return resolution.rawValue
            case .rejected(let code, _, _): return code
            }
        }
    }

    /// Applies batches one after another, carrying state forward like a database would.
    struct World {
        var entities: [EntityKey: EntityState] = [:]
        var households: [Scope: HouseholdState] = [:]
        /// Idempotency keys are remembered per user.
        var recorded: [String: [ExactKey: Int64?]] = [:]

        mutating func push(_ applier: BatchApplier, _ operations: [SyncOperation]) -> BatchOutcome {
            let snapshot = BatchApplier.Snapshot(entities: entities, recorded: recorded[applier.userID] ?? [:], households: households)
            let outcome = applier.apply(operations, snapshot: snapshot)
            for state in outcome.writes { entities[state.key] = state }
            for (key, version) in outcome.recorded { recorded[applier.userID, default: [:]][ExactKey(key)] = version }
            for household in outcome.households { households[.household(household.id)] = household }
            return outcome
        }
    }

    /// Merges grow a stored document beyond any one push; the stored size (document and
    /// metadata) is bounded, the operation that would pass the bound is refused alone.
    @Test func aWriteThatWouldGrowTheStoredDocumentPastTheLimitIsRefusedAlone() {
        var collections = Collections.default
        collections.documentLimits.maximumBytes = 3_000
        let applier = BatchApplier(userID: "alice", collections: collections, now: F.now)
        let chunk = JSONValue.string(String(repeating: "x", count: 1_000))
        var world = World()
        let grown = world.push(applier, [
            Self.op(.create, "userGoals", "g", data: ["a": chunk]),
            Self.op(.update, "userGoals", "g", base: 1, data: ["b": chunk]),
        ])
        #expect(Self.statusCodes(grown) == ["applied", "applied"])
        let key = EntityKey(scope: .user("alice"), entityType: "userGoals", entityID: "g")
        let before = world.entities[key]
        #expect(before.map { $0.storedBytes > 2_000 && $0.storedBytes <= 3_000 } == true)

        let over = world.push(applier, [
            Self.op(.update, "userGoals", "g", base: 2, data: ["c": chunk]),
            Self.op(.create, "weightLogs", "w", data: ["kg": 70]),
        ])
        #expect(Self.statusCodes(over) == ["VALIDATION_ERROR", "applied"])
        if case .rejected(_, let message, let retryable) = over.results[0].status {
            #expect(message.contains("over the limit of 3000") && !retryable, "\(message)")
        }
        #expect(world.entities[key] == before)
        // A write that shrinks it is fine.
        #expect(Self.statusCodes(world.push(applier, [Self.op(.update, "userGoals", "g", base: 2, data: ["a": nil])])) == ["applied"])
    }

    /// Item tombstones and the stamps of removed fields are kept for the tombstone retention,
    /// then dropped at the entity's next write: the metadata does not grow forever.
    @Test func mergeMetadataIsPrunedAfterTheRetention() {
        var collections = Collections.default
        collections.documentLimits.metadataRetentionMilliseconds = 86_400_000
        let applier = BatchApplier(userID: "alice", collections: collections, now: F.now)
        let key = EntityKey(scope: .user("alice"), entityType: "foodLogs", entityID: "f")
        let old = F.now.adding(milliseconds: -2 * 86_400_000), recent = F.now.adding(milliseconds: -3_600_000)
        var world = World()
        world.entities[key] = EntityState(
            key: key, version: 1, data: ["loggedDate": "2026-01-15", "mealType": "lunch", "items": []], clientTimestamp: old, updatedAt: old,
            meta: EntityMeta(itemTombstones: ["gone-long-ago": old, "gone-recently": recent])
        )
        let goals = EntityKey(scope: .user("alice"), entityType: "userGoals", entityID: "g")
        world.entities[goals] = EntityState(
            key: goals, version: 1, data: ["kept": 1], clientTimestamp: old, updatedAt: old,
            meta: EntityMeta(fields: ["kept": FieldStamp(version: 1, timestamp: old), "removedLongAgo": FieldStamp(version: 1, timestamp: old),
                                      "removedRecently": FieldStamp(version: 1, timestamp: recent)])
        )
        let outcome = world.push(applier, [
            Self.op(.update, "foodLogs", "f", base: 1, data: ["loggedDate": "2026-01-15", "mealType": "lunch", "items": [["id": "i1", "calories": 5]]]),
            Self.op(.update, "userGoals", "g", base: 1, data: ["other": 2]),
        ])
        #expect(Self.statusCodes(outcome) == ["applied", "applied"])
        #expect(Set(world.entities[key]?.meta.itemTombstones.keys ?? [:].keys) == ["gone-recently"])
        #expect(Set(world.entities[goals]?.meta.fields.keys ?? [:].keys) == ["kept", "removedRecently", "other"])

        // A deletion this write makes is kept whatever its client time (a device's clock may run
        // late): pruning only drops what an earlier write stored.
        let late = Self.op(.update, "foodLogs", "f", base: 2, data: [
            "loggedDate": "2026-01-15", "mealType": "lunch", "items": [["id": "i1", "deletedAt": .string(old.rfc3339)]],
        ])
        #expect(Self.statusCodes(world.push(applier, [late])) == ["applied"])
        #expect(Set(world.entities[key]?.meta.itemTombstones.keys ?? [:].keys) == ["gone-recently", "i1"])
        // Nor by the next write: its retention runs from when the server stored it, so a stale
        // copy pushed after (older than the deletion) does not bring the item back.
        let next = Self.op(.update, "foodLogs", "f", base: 3, data: ["mealType": "dinner"], key: "next")
        #expect(Self.statusCodes(world.push(applier, [next])) == ["applied"])
        #expect(world.entities[key]?.meta.itemTombstones["i1"] == old)
        let stale = Self.op(.update, "foodLogs", "f", base: 2, data: [
            "loggedDate": "2026-01-15", "mealType": "lunch", "items": [["id": "i1", "calories": 300, "updatedAt": .string(old.adding(milliseconds: -1).rfc3339)]],
        ], key: "stale")
        let merged = world.push(applier, [stale])
        #expect(Self.statusCodes(merged) == ["merged"], "\(merged.results)")
        #expect(world.entities[key]?.data?["items"] == [], "\(String(describing: world.entities[key]?.data))")
        // A retention after it was stored, it goes at the next write.
        let later = BatchApplier(userID: "alice", collections: collections, now: F.now.adding(milliseconds: 86_400_001))
        let pruning = world.push(later, [Self.op(.update, "foodLogs", "f", base: world.entities[key]?.version ?? 0, data: ["mealType": "lunch"], key: "later")])
        #expect(Self.statusCodes(pruning) == ["applied"])
        #expect(world.entities[key]?.meta.itemTombstones.isEmpty == true && world.entities[key]?.meta.tombstonesStored.isEmpty == true)
    }

    /// A tombstone another device deleted again later (its deletedAt raised) is kept for the
    /// retention from that later deletion, not only from when the server first stored it.
    @Test func aTombstoneDeletedAgainLaterIsKeptFromTheLaterDeletion() {
        var collections = Collections.default
        collections.documentLimits.metadataRetentionMilliseconds = 86_400_000
        let hour: Int64 = 3_600_000
        func applier(after hours: Int64) -> BatchApplier {
            BatchApplier(userID: "alice", collections: collections, now: F.now.adding(milliseconds: hours * hour))
        }
        let key = EntityKey(scope: .user("alice"), entityType: "foodLogs", entityID: "f")
        var world = World()
        world.entities[key] = EntityState(
            key: key, version: 1, data: ["loggedDate": "2026-01-15", "mealType": "lunch", "items": [["id": "i2", "calories": 5]]],
            clientTimestamp: F.now, updatedAt: F.now
        )
        func items(_ list: JSONValue) -> JSONObject { ["loggedDate": "2026-01-15", "mealType": "lunch", "items": list] }
        // Stored now, with a deletedAt two days old; deleted again 10 hours on, as of 10 hours on.
        let first = world.push(applier(after: 0), [Self.op(.update, "foodLogs", "f", base: 1, data: items([["id": "i2", "deletedAt": .string(F.now.adding(milliseconds: -48 * hour).rfc3339)]]), key: "d1")])
        let again = world.push(applier(after: 10), [Self.op(.update, "foodLogs", "f", base: 2, data: items([["id": "i2", "deletedAt": .string(F.now.adding(milliseconds: 10 * hour).rfc3339)]]), key: "d2")])
        // 29 hours on the first store is past the retention, the later deletion is not.
        let later = world.push(applier(after: 29), [Self.op(.update, "foodLogs", "f", base: 3, data: ["mealType": "dinner"], key: "w")])
        #expect(Self.statusCodes(first) + Self.statusCodes(again) + Self.statusCodes(later) == ["applied", "applied", "applied"])
        #expect(world.entities[key]?.meta.itemTombstones["i2"] == F.now.adding(milliseconds: 10 * hour))
        // 35 hours on, it is past the retention from either: dropped.
        _ = world.push(applier(after: 35), [Self.op(.update, "foodLogs", "f", base: 4, data: ["mealType": "lunch"], key: "w2")])
        #expect(world.entities[key]?.meta.itemTombstones.isEmpty == true)
    }

    @Test func operationsApplyInOrderAndRejectionsDoNotStopTheRest() {
        let outcome = Self.alice.apply(
            [
                Self.op(.create, "weightLogs", "w1", data: ["kg": 70]),
                Self.op(.update, "weightLogs", "w1", base: 1, data: ["kg": 71]),
                Self.op(.create, "nope", "x"),
                Self.op(.update, "weightLogs", "w1", base: 5, data: ["kg": 72]),
                Self.op(.delete, "weightLogs", "missing"),
                Self.op(.delete, "weightLogs", "w1", base: 2),
            ],
            snapshot: .init()
        )
        #expect(Self.statusCodes(outcome) == ["applied", "applied", "VALIDATION_ERROR", "VALIDATION_ERROR", "ENTITY_NOT_FOUND", "applied"])
        #expect(outcome.results.map(\.version) == [1, 2, nil, nil, nil, 3])
        // One final state per entity reaches the feed.
        #expect(outcome.writes.count == 1)
        #expect(outcome.writes[0].version == 3 && outcome.writes[0].isDeleted)
        #expect(outcome.recorded.map(\.key).count == 3)
    }

    @Test func unknownTypeMessagesNameTheType() {
        let result = Self.alice.apply([Self.op(.create, "nope", "x")], snapshot: .init()).results[0]
        #expect(result.status == .rejected(errorCode: "VALIDATION_ERROR", message: "unknown entity type 'nope'", retryable: false))
    }

    @Test func duplicatesAnswerTheEarlierVersionWithinAndAcrossJobs() {
        var world = World()
        let create = Self.op(.create, "weightLogs", "w1", data: ["kg": 70], key: "same")
        let first = world.push(Self.alice, [create, create])
        #expect(Self.statusCodes(first) == ["applied", "duplicate"])
        #expect(first.results[1].version == 1)
        let update = Self.op(.update, "weightLogs", "w1", base: 1, data: ["kg": 80], key: "u")
        _ = world.push(Self.alice, [update])
        let replay = world.push(Self.alice, [create, update])
        #expect(Self.statusCodes(replay) == ["duplicate", "duplicate"])
        #expect(replay.results.map(\.version) == [1, 2])
        #expect(replay.writes.isEmpty && replay.recorded.isEmpty)
    }

    @Test func rejectedKeysAreNotRememberedSoAFixedRetryApplies() {
        var world = World()
        let bad = Self.op(.create, "timeEntries", "t1", data: ["project_id": "p"], key: "k")
        #expect(Self.statusCodes(world.push(Self.alice, [bad])) == ["VALIDATION_ERROR"])
        let fixed = Self.op(.create, "timeEntries", "t1", data: ["project_id": "p", "minutes": 5], key: "k")
        #expect(Self.statusCodes(world.push(Self.alice, [fixed])) == ["applied"])
    }

    @Test func fieldRulesApplyToTheDocumentAsStored() {
        var world = World()
        _ = world.push(Self.alice, [Self.op(.create, "timeEntries", "t1", data: ["project_id": "p", "minutes": 5])])
        // A patch without the required fields is fine: the stored document still has them ...
        let patch = world.push(Self.alice, [Self.op(.update, "timeEntries", "t1", base: 1, data: ["note": "hi"])])
        #expect(Self.statusCodes(patch) == ["applied"])
        // ... but removing one is not.
        let removal = world.push(Self.alice, [Self.op(.update, "timeEntries", "t1", base: 2, data: ["minutes": nil])])
        #expect(removal.results[0].status == .rejected(errorCode: "VALIDATION_ERROR", message: "field 'minutes' is required", retryable: false))
        let wrongType = world.push(Self.alice, [Self.op(.update, "timeEntries", "t1", base: 2, data: ["minutes": "5"])])
        #expect(wrongType.results[0].status == .rejected(errorCode: "VALIDATION_ERROR", message: "field 'minutes' must be a number", retryable: false))
    }

    @Test func parentArchivedRuleRefusesWritesUnderAnArchivedProject() {
        var world = World()
        let setup = world.push(
            Self.alice,
            [
                Self.op(.create, "projects", "p1", data: ["name": "Old"]),
                Self.op(.create, "timeEntries", "t1", data: ["project_id": "p1", "minutes": 5]),
                Self.op(.update, "projects", "p1", base: 1, data: ["archived": true]),
                Self.op(.create, "timeEntries", "t2", data: ["project_id": "p1", "minutes": 5]),
                Self.op(.update, "timeEntries", "t1", base: 1, data: ["minutes": 6]),
                Self.op(.delete, "timeEntries", "t1", base: 1),
                Self.op(.create, "timeEntries", "t3", data: ["project_id": "elsewhere", "minutes": 5]),
            ]
        )
        #expect(Self.statusCodes(setup) == ["applied", "applied", "applied", "PROJECT_ARCHIVED", "PROJECT_ARCHIVED", "PROJECT_ARCHIVED", "applied"])
        #expect(setup.results[3].status == .rejected(errorCode: "PROJECT_ARCHIVED", message: "projects 'p1' is archived", retryable: false))
        // Nor can an entry be moved out of the archived project, nor one moved into it.
        let moves = world.push(
            Self.alice,
            [
                Self.op(.update, "timeEntries", "t1", base: 1, data: ["project_id": "elsewhere", "minutes": 500]),
                Self.op(.update, "timeEntries", "t3", base: 1, data: ["project_id": "p1"]),
            ]
        )
        #expect(Self.statusCodes(moves) == ["PROJECT_ARCHIVED", "PROJECT_ARCHIVED"])
        let reopened = world.push(
            Self.alice,
            [Self.op(.update, "projects", "p1", base: 2, data: ["archived": false]), Self.op(.create, "timeEntries", "t2", data: ["project_id": "p1", "minutes": 5], key: "again")]
        )
        #expect(Self.statusCodes(reopened) == ["applied", "applied"])
    }

    @Test func parentKeysComeFromPushedAndStoredDocuments() {
        let stored = EntityState(
            key: EntityKey(scope: .user("alice"), entityType: "timeEntries", entityID: "t1"),
            version: 1, data: ["project_id": "p-stored", "minutes": 1], clientTimestamp: F.now, updatedAt: F.now
        )
        let keys = Self.alice.parentKeys(
            for: [Self.op(.update, "timeEntries", "t1", base: 1, data: ["project_id": "p-new"]), Self.op(.create, "weightLogs", "w")],
            loaded: [stored.key: stored]
        )
        #expect(keys == [EntityKey(scope: .user("alice"), entityType: "projects", entityID: "p-new"), EntityKey(scope: .user("alice"), entityType: "projects", entityID: "p-stored")])
    }

    @Test func readOnlyAndScopeMismatchesAreRejected() {
        let outcome = Self.alice.apply(
            [
                Self.op(.create, "dailySummaries", "2026-01-15"),
                Self.op(.create, "weightLogs", "w", household: "h1"),
                Self.op(.create, "inventory", "i"),
                Self.op(.create, "households", "h1", household: "h2"),
                Self.op(.create, "households", "a:b"),
                Self.op(.create, "household_members", "nocolon"),
                // One grapheme, 301 code points: past a household id's 128.
                Self.op(.create, "households", "e" + String(repeating: "\u{301}", count: 300)),
            ],
            snapshot: .init()
        )
        #expect(Self.statusCodes(outcome) == ["PERMISSION_DENIED", "VALIDATION_ERROR", "VALIDATION_ERROR", "VALIDATION_ERROR", "VALIDATION_ERROR", "VALIDATION_ERROR", "VALIDATION_ERROR"])
    }

    @Test func requirementsNameLocksAndLoads() {
        let requirements = Self.alice.requirements(for: [
            Self.op(.create, "inventory", "i1", household: "h2"),
            Self.op(.create, "households", "h1"),
            Self.op(.create, "weightLogs", "w1", key: "k"),
            Self.op(.create, "weightLogs", "w2", key: "k"),
            Self.op(.create, "nope", "x"),
        ])
        #expect(requirements.scopes == [.household("h1"), .household("h2"), .user("alice")])
        #expect(requirements.householdIDs == ["h1", "h2"])
        // Every key is looked up, even an invalid operation's: a replay is a duplicate first.
        #expect(requirements.idempotencyKeys == ["create-households-h1-0", "create-inventory-i1-0", "create-nope-x-0", "k"])
        #expect(requirements.entityKeys.count == 5)
        #expect(requirements.entityKeys.contains(EntityKey(scope: .household("h1"), entityType: "household_members", entityID: "h1:alice")))
    }

    // MARK: households

    @Test func aHouseholdCreatedAndFilledInOnePushWorks() throws {
        var world = World()
        let outcome = world.push(
            Self.alice,
            [
                Self.op(.create, "households", "h1", data: ["name": "Home", "owner": "mallory"]),
                Self.op(.create, "inventory", "milk", data: ["qty": 1], household: "h1"),
                Self.op(.create, "household_members", "h1:bob", data: ["user_id": "bob", "role": "member"]),
            ]
        )
        #expect(Self.statusCodes(outcome) == ["applied", "applied", "applied"])
        let household = try #require(outcome.households.first)
        #expect(household.ownerID == "alice")
        #expect(household.members == ["alice": .owner, "bob": .member])
        #expect(outcome.wakeUsers == ["alice", "bob"])
        // The creator's membership is an entity in the household feed too, and the owner field is the server's.
        #expect(outcome.writes.map(\.key.entityID) == ["h1", "h1:alice", "milk", "h1:bob"])
        #expect(outcome.writes[0].data == ["name": "Home", "owner": "alice"])
        #expect(outcome.writes[1].data == ["user_id": "alice", "role": "owner"])
        #expect(outcome.scopes == [.household("h1")])
    }

    @Test func householdPermissions() {
        var world = World()
        _ = world.push(Self.alice, [Self.op(.create, "households", "h1", data: ["name": "Home"])])
        let carol = BatchApplier(userID: "carol", collections: .default, now: F.now)

        // An outsider can do nothing.
        let outsider = world.push(
            carol,
            [
                Self.op(.create, "inventory", "x", household: "h1"),
                Self.op(.update, "households", "h1", base: 1, data: ["name": "Mine"]),
                Self.op(.create, "households", "h1", data: ["name": "Mine"]),
                Self.op(.create, "household_members", "h1:carol", data: ["user_id": "carol", "role": "member"]),
                Self.op(.delete, "household_members", "h1:alice", base: 1),
                Self.op(.create, "inventory", "x", household: "nowhere"),
            ]
        )
        #expect(Self.statusCodes(outsider) == ["PERMISSION_DENIED", "PERMISSION_DENIED", "PERMISSION_DENIED", "PERMISSION_DENIED", "PERMISSION_DENIED", "PERMISSION_DENIED"])

        // A member writes data but cannot rename or manage members.
        _ = world.push(Self.alice, [Self.op(.create, "household_members", "h1:bob", data: ["user_id": "bob", "role": "member"])])
        let member = world.push(
            Self.bob,
            [
                Self.op(.create, "inventory", "eggs", data: ["qty": 12], household: "h1"),
                Self.op(.update, "households", "h1", base: 1, data: ["name": "Bob's"]),
                Self.op(.create, "household_members", "h1:carol", data: ["user_id": "carol", "role": "member"]),
                Self.op(.delete, "households", "h1", base: 1),
            ]
        )
        #expect(Self.statusCodes(member) == ["applied", "PERMISSION_DENIED", "PERMISSION_DENIED", "PERMISSION_DENIED"])

        // The owner's rules on memberships.
        let owner = world.push(
            Self.alice,
            [
                Self.op(.create, "household_members", "h1:carol", data: ["user_id": "dave", "role": "member"]),
                Self.op(.create, "household_members", "h1:carol", data: ["user_id": "carol", "role": "owner"], key: "k2"),
                Self.op(.update, "household_members", "h1:bob", base: 1, data: ["role": "member"]),
                Self.op(.delete, "household_members", "h1:alice", base: 1),
                Self.op(.create, "household_members", "nowhere:carol", data: ["user_id": "carol", "role": "member"]),
            ]
        )
        #expect(Self.statusCodes(owner) == ["VALIDATION_ERROR", "VALIDATION_ERROR", "VALIDATION_ERROR", "VALIDATION_ERROR", "ENTITY_NOT_FOUND"])
    }

    @Test func membersLeaveAndOwnersRemoveAndReAdd() throws {
        var world = World()
        _ = world.push(Self.alice, [Self.op(.create, "households", "h1", data: ["name": "Home"]), Self.op(.create, "household_members", "h1:bob", data: ["user_id": "bob", "role": "member"])])

        let leave = world.push(Self.bob, [Self.op(.delete, "household_members", "h1:bob", base: 1)])
        #expect(Self.statusCodes(leave) == ["applied"])
        #expect(leave.households.first?.members == ["alice": .owner])
        #expect(leave.wakeUsers == ["bob"])
        // Gone means gone: bob cannot write any more.
        #expect(Self.statusCodes(world.push(Self.bob, [Self.op(.create, "inventory", "x", household: "h1")])) == ["PERMISSION_DENIED"])
        // His tablet's leave, queued under another key, is a delete of a deleted entity; a
        // leave of someone who never belonged finds nothing.
        let again = world.push(Self.bob, [Self.op(.delete, "household_members", "h1:bob", base: 1, key: "tablet-leave")])
        #expect(Self.statusCodes(again) == ["server_wins"] && again.writes.isEmpty && again.households.isEmpty)
        #expect(Self.statusCodes(world.push(Self.bob, [Self.op(.delete, "household_members", "h1:carol", base: 1, key: "not-his")])) == ["PERMISSION_DENIED"])
        #expect(Self.statusCodes(world.push(BatchApplier(userID: "carol", collections: .default, now: F.now), [Self.op(.delete, "household_members", "h1:carol", base: 1)])) == ["ENTITY_NOT_FOUND"])

        // The owner adds bob again although his membership is a tombstone, then removes him.
        let readd = world.push(Self.alice, [Self.op(.create, "household_members", "h1:bob", data: ["user_id": "bob", "role": "member"], key: "readd")])
        #expect(Self.statusCodes(readd) == ["client_wins"])
        #expect(readd.households.first?.members["bob"] == .member)
        let remove = world.push(Self.alice, [Self.op(.delete, "household_members", "h1:bob", base: 0, key: "remove")])
        #expect(Self.statusCodes(remove) == ["client_wins"])
        #expect(remove.households.first?.members["bob"] == nil)
    }

    @Test func archivingEndsTheHouseholdForEveryone() throws {
        var world = World()
        _ = world.push(Self.alice, [Self.op(.create, "households", "h1", data: ["name": "Home"]), Self.op(.create, "household_members", "h1:bob", data: ["user_id": "bob", "role": "member"])])
        // A stale archive still wins: the owner's delete is final.
        let archive = world.push(Self.alice, [Self.op(.delete, "households", "h1", base: 0, key: "archive")])
        #expect(Self.statusCodes(archive) == ["client_wins"])
        let household = try #require(archive.households.first)
        #expect(household.archived)
        #expect(archive.wakeUsers == ["alice", "bob"])
        #expect(!household.isActiveMember("alice") && !household.isActiveMember("bob"))
        let after = world.push(
            Self.alice,
            [
                Self.op(.create, "inventory", "x", household: "h1"),
                Self.op(.create, "households", "h1", data: ["name": "Again"], key: "recreate"),
                Self.op(.create, "household_members", "h1:carol", data: ["user_id": "carol", "role": "member"]),
            ]
        )
        #expect(Self.statusCodes(after) == ["PERMISSION_DENIED", "server_wins", "ENTITY_NOT_FOUND"])
        // Its tombstone purged (retention), the archive still holds: a re-create changes nothing.
        world.entities[EntityKey(scope: .household("h1"), entityType: "households", entityID: "h1")] = nil
        let purged = world.push(Self.alice, [Self.op(.create, "households", "h1", data: ["name": "Again"], key: "recreate-after-purge")])
        #expect(Self.statusCodes(purged) == ["server_wins"])
        #expect(purged.writes.isEmpty && world.households[.household("h1")]?.archived == true)
        // A conflict names a version, also with nothing stored: clients refuse an answer without.
        #expect(purged.results.map(\.version) == [0])
        #expect(try JobCodec.decodeResults(JobCodec.encodeResults(purged.results)) == purged.results)
    }

    /// Household ids are told apart by their bytes, as the databases tell them: owning NFC
    /// "café" gives no right in NFD "café", another user's household.
    @Test func canonicallyEquivalentHouseholdsAreDifferentHouseholds() {
        let nfc = "caf\u{E9}", nfd = "cafe\u{301}"
        var world = World()
        #expect(Self.statusCodes(world.push(Self.bob, [Self.op(.create, "households", nfd, data: ["name": "Bob's"])])) == ["applied"])
        #expect(Self.statusCodes(world.push(Self.alice, [Self.op(.create, "households", nfc, data: ["name": "Alice's"])])) == ["applied"])
        #expect(world.households.count == 2)
        // Alice, owner of the NFC one, writes into both in one push: only hers takes it.
        let both = world.push(Self.alice, [
            Self.op(.create, "inventory", "mine", household: nfc), Self.op(.create, "inventory", "intruder", household: nfd),
            Self.op(.create, "household_members", "\(nfd):alice", data: ["user_id": "alice", "role": "member"], household: nfd),
        ])
        #expect(Self.statusCodes(both) == ["applied", "PERMISSION_DENIED", "PERMISSION_DENIED"])
        #expect(world.households[.household(nfd)]?.isActiveMember("alice") == false)
        #expect(world.households[.household(nfd)]?.ownerID == "bob" && world.households[.household(nfc)]?.ownerID == "alice")
    }

    /// Idempotency keys are told apart by their bytes, as their records are stored: the NFD
    /// spelling of a key used in the same batch is another operation, not a duplicate.
    @Test func canonicallyEquivalentIdempotencyKeysAreDifferentKeys() {
        var first = Self.op(.create, "weightLogs", "w1", data: ["kg": 70])
        first.idempotencyKey = "caf\u{E9}"
        var second = Self.op(.create, "weightLogs", "w2", data: ["kg": 71])
        second.idempotencyKey = "cafe\u{301}"
        var world = World()
        let outcome = world.push(Self.alice, [first, second])
        #expect(Self.statusCodes(outcome) == ["applied", "applied"])
        #expect(outcome.recorded.count == 2)
        #expect(Self.alice.requirements(for: [first, second]).idempotencyKeys.count == 2)
        // Each pushed again is its own duplicate.
        let again = world.push(Self.alice, [second, first])
        #expect(again.results.map(\.status) == [.duplicate, .duplicate])
        #expect(again.results.map(\.entityID) == ["w2", "w1"])
    }

    /// User ids are told apart by their bytes too: NFD "josé" is another user than NFC "josé"
    /// (two accounts an app may issue tokens to), neither member nor owner of her household.
    @Test func canonicallyEquivalentUsersAreDifferentUsers() {
        let nfc = BatchApplier(userID: "jos\u{E9}", collections: .default, now: F.now)
        let nfd = BatchApplier(userID: "jose\u{301}", collections: .default, now: F.now)
        var world = World()
        #expect(Self.statusCodes(world.push(nfc, [Self.op(.create, "households", "home", data: ["name": "Home"])])) == ["applied"])
        let intrusion = world.push(nfd, [
            Self.op(.create, "inventory", "intruder", household: "home"),
            Self.op(.create, "household_members", "home:mallory", data: ["user_id": "mallory", "role": "member"], household: "home"),
            Self.op(.delete, "households", "home", base: 1),
        ])
        #expect(Self.statusCodes(intrusion) == ["PERMISSION_DENIED", "PERMISSION_DENIED", "PERMISSION_DENIED"])
        #expect(world.households[.household("home")]?.isActiveMember(nfd.userID) == false)
        #expect(world.households[.household("home")]?.archived == false)
        // The owner adds the other spelling: a member of its own, not the owner again.
        let added = world.push(nfc, [
            Self.op(.create, "household_members", "home:jose\u{301}", data: ["user_id": "jose\u{301}", "role": "member"], household: "home")
        ])
        #expect(Self.statusCodes(added) == ["applied"])
        #expect(world.households[.household("home")]?.members.count == 2)
        #expect(world.households[.household("home")]?.isActiveMember(nfd.userID) == true)
        // A membership id's user part is read by bytes after the household's.
        #expect(HouseholdIDs.splitMembershipID("cafe\u{301}:bob", household: "caf\u{E9}") == nil)
        #expect(HouseholdIDs.splitMembershipID("caf\u{E9}:bob", household: "caf\u{E9}")?.user == "bob")
    }

    /// Household ids hold no ':' byte, and a membership id splits at its first: a ':' followed by
    /// a combining mark is one Character, which the character-wise checks passed over.
    @Test func householdIDsAndMembershipIDsAreSplitByBytes() {
        let alice = BatchApplier(userID: "alice", collections: .default, now: F.now)
        var world = World()
        let created = world.push(alice, [
            Self.op(.create, "households", "a:\u{301}b", data: ["name": "Colon"]),
            Self.op(.create, "households", "home", data: ["name": "Home"]),
            // No household_id: the household is what stands before the first ':'.
            Self.op(.create, "household_members", "home:\u{301}x", data: ["user_id": "\u{301}x", "role": "member"]),
        ])
        #expect(Self.statusCodes(created) == ["VALIDATION_ERROR", "applied", "applied"])
        #expect(world.households[.household("home")]?.isActiveMember("\u{301}x") == true)
        #expect(world.households[.household("a:\u{301}b")] == nil)
        let split = HouseholdIDs.splitMembershipID("home:\u{301}x", household: nil)
        #expect(split.map { (Array($0.household.utf8), Array($0.user.utf8)) }.map { $0 == Array("home".utf8) && $1 == Array("\u{301}x".utf8) } == true)
    }

    // MARK: summaries

    @Test func summaryDaysCoverTheOldAndNewDateOfEveryChangedLog() {
        let key = EntityKey(scope: .user("alice"), entityType: "foodLogs", entityID: "f1")
        let stored = EntityState(key: key, version: 1, data: ["loggedDate": "2026-01-14", "mealType": "lunch", "items": []], clientTimestamp: F.now, updatedAt: F.now)
        let outcome = Self.alice.apply(
            [
                Self.op(.update, "foodLogs", "f1", base: 1, data: ["loggedDate": "2026-01-15"]),
                Self.op(.create, "foodLogs", "f2", data: ["loggedDate": "2026-01-20", "mealType": "dinner", "items": []]),
                Self.op(.create, "weightLogs", "w", data: ["loggedDate": "2026-01-21"]),
            ],
            snapshot: .init(entities: [key: stored])
        )
        let groups = DailySummaries().groupsTouched(by: outcome.writes, original: [key: stored])
        #expect(groups.map(\.key).sorted() == ["2026-01-14", "2026-01-15", "2026-01-20"])
        #expect(groups.allSatisfy { $0.scope == .user("alice") })
    }

    @Test func theGroupsAPushNamesAreItsSourceDocumentsGroupsInTheirScopes() {
        let derivation = DailySummaries()
        let operations = [
            Self.op(.create, "foodLogs", "f1", data: ["loggedDate": "2026-01-15", "mealType": "lunch", "items": []]),
            Self.op(.create, "foodLogs", "f2", data: ["loggedDate": "2026-01-15", "mealType": "dinner", "items": []]),
            // A partial update names the day it sets; one that sets none names none.
            Self.op(.update, "foodLogs", "f3", base: 1, data: ["loggedDate": "2026-01-16"]),
            Self.op(.update, "foodLogs", "f4", base: 1, data: ["mealType": "dinner"]),
            // A delete's group is its stored document's: not known before the read.
            Self.op(.delete, "foodLogs", "f5", base: 1),
            // Other types, and a write its type's scope refuses, name nothing.
            Self.op(.create, "weightLogs", "w", data: ["loggedDate": "2026-01-17"]),
            Self.op(.create, "foodLogs", "f6", data: ["loggedDate": "2026-01-18", "mealType": "lunch", "items": []], household: "h1"),
        ]
        #expect(Self.alice.groupsNamed(by: operations, for: derivation) == [
            DerivedGroup(scope: .user("alice"), key: "2026-01-15"), DerivedGroup(scope: .user("alice"), key: "2026-01-16"),
        ])
        #expect(Self.bob.groupsNamed(by: Array(operations.prefix(1)), for: derivation) == [DerivedGroup(scope: .user("bob"), key: "2026-01-15")])
        #expect(Self.alice.groupsNamed(by: [], for: derivation).isEmpty)
    }

    @Test func summaryWritesCombineStoredLogsWithTheJobsWrites() {
        let outcome = Self.alice.apply(
            [
                Self.op(.create, "foodLogs", "f2", data: ["loggedDate": "2026-01-15", "mealType": "dinner", "items": [["id": "a", "calories": 300]]]),
                Self.op(.delete, "foodLogs", "f3", base: 1),
            ],
            snapshot: .init(entities: [
                EntityKey(scope: .user("alice"), entityType: "foodLogs", entityID: "f3"): EntityState(
                    key: EntityKey(scope: .user("alice"), entityType: "foodLogs", entityID: "f3"), version: 1,
                    data: ["loggedDate": "2026-01-16", "mealType": "x", "items": [["id": "b", "calories": 5]]], clientTimestamp: F.now, updatedAt: F.now
                )
            ])
        )
        func stored(_ type: String, _ id: String, _ data: JSONObject, version: Int64 = 1) -> EntityState {
            EntityState(key: EntityKey(scope: .user("alice"), entityType: type, entityID: id), version: version, data: data, clientTimestamp: F.now, updatedAt: F.now)
        }
        let inputs = [
            stored("foodLogs", "f1", ["loggedDate": "2026-01-15", "mealType": "lunch", "items": [["id": "c", "calories": 200]]]),
            // The stored copy of f3 is superseded by the job's delete.
            stored("foodLogs", "f3", ["loggedDate": "2026-01-16", "mealType": "x", "items": [["id": "b", "calories": 5]]]),
            stored("dailySummaries", "2026-01-16", ["date": "2026-01-16"], version: 4),
        ]
        let groups: Set<DerivedGroup> = [.init(scope: .user("alice"), key: "2026-01-15"), .init(scope: .user("alice"), key: "2026-01-16")]
        let writes = DailySummaries().plan(groups: groups, stored: inputs, writes: outcome.writes, now: F.now)
        #expect(writes.map(\.key.entityID) == ["2026-01-15", "2026-01-16"])
        #expect(writes[0].data?["calories"] == 500 && writes[0].data?["meal_count"] == 2)
        #expect(writes[1].isDeleted && writes[1].version == 5)
    }
}

extension BatchApplierTests {
    /// A job's changes enter the feed in the order of each entity's last write, whatever the ids
    /// hash to: writes A, B, A, C go to the feed as B, A, C (a re-written parent never lands after
    /// a child created after it).
    @Test func feedOrderFollowsEachEntitysLastWriteDeterministically() {
        for trial in 0..<64 {
            let (a, b, c) = ("a\(trial)", "b\(trial)", "c\(trial)")
            let outcome = Self.alice.apply(
                [
                    Self.op(.create, "weightLogs", a, data: ["kg": 1]),
                    Self.op(.create, "weightLogs", b, data: ["kg": 2]),
                    Self.op(.update, "weightLogs", a, base: 1, data: ["kg": 3]),
                    Self.op(.create, "weightLogs", c, data: ["kg": 4]),
                ],
                snapshot: .init()
            )
            #expect(outcome.writes.map(\.key.entityID) == [b, a, c], "trial \(trial)")
        }
    }
}

extension BatchApplierTests {
    /// Replaying any prefix of a history of batches (the same idempotency keys, as a client
    /// retrying would) answers `duplicate` with the recorded versions and changes nothing — across
    /// every policy of the built-in types, creates, patches, deletes and stale bases.
    @Test func replayingAnyPrefixOfAHistoryChangesNothing() {
        let types = ["weightLogs", "userGoals", "foodLogs", "recentFoods", "categories", "contacts"]
        var cases = 0
        for seed in UInt64(1)...300 {
            var random = SeededGenerator(seed: seed)
            var world = World()
            var history: [SyncOperation] = []
            var versions: [String: Int64] = [:]
            for batch in 0..<6 {
                let operations: [SyncOperation] = (0..<Int.random(in: 1...5, using: &random)).map { index in
                    let type = types.randomElement(using: &random)!
                    let id = ["e1", "e2"].randomElement(using: &random)!
                    let known = versions["\(type)/\(id)"] ?? 0
                    let intent: SyncOperation.Intent = known == 0 ? .create : [.update, .update, .delete, .create].randomElement(using: &random)!
                    var data: JSONObject = ["n": .int(Int64(index)), "loggedDate": "2026-01-15", "mealType": "lunch"]
                    if type == "foodLogs", Bool.random(using: &random) { data["items"] = [["id": "a", "calories": .int(Int64(index))]] }
                    return Self.op(intent, type, id, base: Int64.random(in: 0...known, using: &random), data: data, key: "s\(seed)-b\(batch)-\(index)")
                }
                let outcome = world.push(Self.alice, operations)
                for state in outcome.writes { versions["\(state.key.entityType)/\(state.key.entityID)"] = state.version }
                history += operations
            }
            let recorded = world.recorded["alice"] ?? [:]
            let before = world.entities
            let prefix = history.prefix(Int.random(in: 1...history.count, using: &random)).filter { recorded[ExactKey($0.idempotencyKey)] != nil }
            guard !prefix.isEmpty else { continue }
            let replay = world.push(Self.alice, Array(prefix))
            cases += prefix.count
            #expect(replay.results.allSatisfy { $0.status == .duplicate }, "seed \(seed)")
            #expect(replay.results.map(\.version) == prefix.map { recorded[ExactKey($0.idempotencyKey)]! }, "seed \(seed)")
            #expect(replay.writes.isEmpty && replay.recorded.isEmpty, "seed \(seed)")
            #expect(world.entities == before, "seed \(seed)")
        }
        #expect(cases > 1000)
        print("replay property: \(cases) replayed operations")
    }
}
