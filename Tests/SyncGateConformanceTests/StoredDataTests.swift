import Foundation
import SyncGateCore
import SyncGateWire
@testable import SyncGatePostgres
import SyncGateStorage
import SyncGateWorker
import SyncGateTestSupport
import Testing

/// What a driver finds stored that it cannot read: it never guesses, and one bad row stalls nothing else.
@Suite(.timeLimit(.minutes(10))) struct StoredDataTests {
    /// A document that merges would grow past `SYNCGATE_MAX_DOCUMENT_BYTES` is refused for that
    /// operation only: the job is done, the stored entity unchanged, the queue moving.
    @Test(arguments: Driver.selected)
    func aDocumentMergedPastTheLimitIsRefusedPerOperation(_ driver: Driver) async throws {
        var collections = Collections.default
        collections.documentLimits.maximumBytes = 3_000
        try await StoreHarness.with(driver, collections: collections) { harness in
            let chunk = JSONValue.string(String(repeating: "x", count: 1_000))
            #expect(try await harness.apply([Op.create("userGoals", "g", ["a": chunk]), Op.update("userGoals", "g", base: 1, ["b": chunk])]).map(\.outcome) == ["applied", "applied"])
            let results = try await harness.apply([Op.update("userGoals", "g", base: 2, ["c": chunk]), Op.create("weightLogs", "w", ["kg": 70])])
            #expect(results.map(\.outcome) == ["VALIDATION_ERROR", "applied"])
            let stored = try await harness.pullAll().changes.filter { $0.entityID == "g" }
            #expect(stored.last?.version == 2)
            #expect(stored.last?.data?["c"] == nil)
        }
    }

    /// Ids that are canonically equivalent but not the same bytes (NFC "café" and NFD "café")
    /// are two rows to both databases; one batch must treat them as two entities too, not fold
    /// them into one in memory (Swift's `String ==` compares canonical equivalence).
    @Test(arguments: Driver.selected)
    func canonicallyEquivalentIDsAreDistinctEntities(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let nfc = "caf\u{E9}", nfd = "cafe\u{301}"
            #expect(nfc == nfd && Array(nfc.utf8) != Array(nfd.utf8))
            let created = try await harness.apply([Op.create("weightLogs", nfc, ["kg": 1]), Op.create("weightLogs", nfd, ["kg": 2])])
            #expect(created.map(\.outcome) == ["applied", "applied"])
            let updated = try await harness.apply([Op.update("weightLogs", nfd, base: 1, ["kg": 3]), Op.update("weightLogs", nfc, base: 1, ["kg": 4])])
            #expect(updated.map(\.outcome) == ["applied", "applied"])
            // The newest change of each id, told apart by bytes.
            let changes = try await harness.pullAll().changes
            let stored = Dictionary(grouping: changes, by: { Array($0.entityID.utf8) }).values.compactMap { $0.max { $0.version < $1.version } }
                .map { (Array($0.entityID.utf8), $0.version, $0.data?["kg"]) }
            #expect(stored.count == 2)
            #expect(stored.contains { $0.0 == Array(nfc.utf8) && $0.1 == 2 && $0.2 == 4 })
            #expect(stored.contains { $0.0 == Array(nfd.utf8) && $0.1 == 2 && $0.2 == 3 })
        }
    }

    /// Scopes versions of NFC and NFD "josé", two users: each raise and each read of them keeps
    /// them apart (a dictionary keyed by `String` folded the two into one, and a live waiter of
    /// one was told the other's version).
    @Test(arguments: Driver.selected)
    func canonicallyEquivalentUsersHaveScopesVersionsOfTheirOwn(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let nfc = "jos\u{E9}", nfd = "jose\u{301}"
            #expect(try await harness.apply([Op.create("households", "h0", ["name": "H"])], user: nfc).map(\.outcome) == ["applied"])
            // One apply raises both: the owner's new household and the member added to it.
            let both = try await harness.apply(
                [Op.create("households", "h1", ["name": "H"]), Op.create("household_members", "h1:\(nfd)", ["household_id": "h1", "user_id": .string(nfd), "role": "member"])],
                user: nfc
            )
            #expect(both.map(\.outcome) == ["applied", "applied"])
            let state = try await harness.store.watchState(feeds: [], users: [nfc, nfd])
            #expect(state.scopesVersions == [ExactKey(nfc): 2, ExactKey(nfd): 1], "\(state.scopesVersions)")
            let raised = try await harness.store.driver.transaction(now: nil, for: .maintenance) { try await $0.bumpScopesVersions(userIDs: [nfd, nfc]) }
            #expect(raised == [ExactKey(nfc): 3, ExactKey(nfd): 2], "\(raised)")
        }
    }

    /// Writes refused for households that do not exist leave no feed behind: the apply's lock
    /// made their feeds, and a user could otherwise fill the feeds table with empty rows.
    @Test(arguments: Driver.selected)
    func refusedWritesToMadeUpHouseholdsLeaveNoFeeds(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            _ = try await harness.apply([Op.create("households", "home", ["name": "Home"])], user: "alice")
            let refused = try await harness.apply(
                (0..<20).map { Op.create("inventory", "i\($0)", ["qty": 1], household: "made-up-\($0)") } + [Op.create("inventory", "x", ["qty": 1], household: "home")],
                user: "mallory"
            )
            #expect(Set(refused.map(\.outcome)) == ["PERMISSION_DENIED"])
            let feeds = try await harness.queryTexts("SELECT scope FROM feeds ORDER BY scope")
            #expect(feeds == ["h:home", "u:alice", "u:mallory"], "\(feeds)")
            // The household's own feed is untouched, and it is written to as before.
            #expect(try await harness.apply([Op.create("inventory", "milk", ["qty": 1], household: "home")], user: "alice").map(\.outcome) == ["applied"])
        }
    }

    /// A household id that begins with a combining mark: its feed key "h:\u{301}x" still reads
    /// back as its scope (a `hasPrefix` of characters did not, and the apply trapped on it, on
    /// every retry, in every worker).
    @Test(arguments: Driver.selected)
    func aHouseholdIDBeginningWithACombiningMarkIsServed(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let id = "\u{301}x"
            let created = try await harness.apply([Op.create("households", id, ["name": "Accent"]), Op.create("inventory", "milk", ["qty": 1], household: id)])
            #expect(created.map(\.outcome) == ["applied", "applied"])
            let pulled = try await harness.pullAll().changes.filter { $0.scope == .household(id) }
            #expect(Set(pulled.map(\.entityID)) == [id, "milk", "\(id):alice"])
        }
    }

    /// Numbers at the top of their range in stored rows (only corruption or a hostile operator
    /// gets them there) trap nothing: a feed head at Int64.max fails its job at once, for good
    /// (retrying cannot help) and the worker keeps serving; an entity at the last version refuses
    /// the operation alone.
    @Test(arguments: Driver.selected)
    func exhaustedCountersFailCleanlyAndTheWorkerStaysUp(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            #expect(try await harness.apply([Op.create("weightLogs", "w1", ["kg": 70]), Op.create("weightLogs", "top", ["kg": 1])]).map(\.outcome) == ["applied", "applied"])
            try await harness.execute("UPDATE entities SET version = 9223372036854775807 WHERE entity_id = 'top'")
            #expect(try await harness.apply([Op.update("weightLogs", "top", base: 1, ["kg": 2]), Op.create("weightLogs", "w2", ["kg": 71])]).map(\.outcome) == ["VALIDATION_ERROR", "applied"])

            try await harness.execute("UPDATE feeds SET head = 9223372036854775807")
            let id = try await harness.push([Op.create("weightLogs", "w3", ["kg": 72])])
            let other = try await harness.push([Op.create("weightLogs", "b1", ["kg": 60])], user: "bob")
            try await harness.withWorkers(1, concurrency: 1) {
                let job = try await harness.waitFinished(id)
                #expect(job.state == .dead)
                #expect(job.attempts == 1, "an error retrying cannot fix was retried")
                #expect(job.lastError?.contains("every sequence number") == true, "\(job.lastError ?? "-")")
                #expect(try await harness.waitFinished(other, user: "bob").state == .done)
            }
        }
    }

    /// A value the database refuses that the shared validation did not foresee (stood in for by a
    /// trigger raising a data exception for documents with a `poison` field) is found and refused
    /// alone: its neighbours apply, the job is done on its first attempt.
    @Test(arguments: Driver.selected)
    func anOperationTheDatabaseRefusesIsRejectedAloneAndItsNeighboursApply(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            try await Self.refusePoison(harness)
            let results = try await harness.apply([
                Op.create("weightLogs", "w1", ["kg": 70]), Op.create("weightLogs", "w2", ["kg": 71, "poison": true]), Op.create("weightLogs", "w3", ["kg": 72]),
            ])
            #expect(results.map(\.outcome) == ["applied", "VALIDATION_ERROR", "applied"])
            if case .rejected(_, let message, let retryable) = results[1].status {
                #expect(message.contains("cannot store") && message.contains("poison refused") && !message.contains("transaction") && !retryable, "\(message)")
            }
            #expect(try await harness.pullAll().changes.map(\.entityID).sorted() == ["w1", "w3"])
            // Alone, it is refused the same way, and its job done on its first attempt (not dead,
            // which would tell the client to push it again).
            let id = try await harness.push([Op.create("weightLogs", "w4", ["poison": 1])])
            try await harness.withWorkers(1, concurrency: 1) {
                let job = try await harness.waitFinished(id)
                #expect(job.state == .done && job.attempts == 1, "\(job.state) after \(job.attempts)")
                let results = try JobCodec.decodeResults(try #require(job.storedResults))
                #expect(results.map(\.outcome) == ["VALIDATION_ERROR"], "\(results)")
            }
        }
    }

    /// An operation the database refuses that needs an earlier one of its job (an update of an
    /// entity the job creates) passes when probed alone: it is found as the end of the first
    /// prefix of the job the database refuses, and refused alone; the rest applies.
    @Test(arguments: Driver.selected)
    func aRefusedOperationThatNeedsAnEarlierOneIsRejectedAlone(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            try await Self.refusePoison(harness)
            let results = try await harness.apply([
                Op.create("weightLogs", "w1", ["kg": 70]), Op.create("weightLogs", "w2", ["kg": 71]),
                Op.update("weightLogs", "w1", base: 1, ["poison": true]), Op.update("weightLogs", "w2", base: 1, ["kg": 72]),
                Op.create("weightLogs", "w3", ["kg": 73, "poison": true]), Op.update("weightLogs", "w2", base: 2, ["poison": 1]),
            ])
            #expect(results.map(\.outcome) == ["applied", "applied", "VALIDATION_ERROR", "applied", "VALIDATION_ERROR", "VALIDATION_ERROR"], "\(results)")
            let stored = try await harness.pullAll().changes
            #expect(stored.map(\.entityID).sorted() == ["w1", "w2"])
            #expect(stored.first { $0.entityID == "w2" }?.data?["kg"] == 72)
        }
    }

    /// When what the database refuses is the feed an operation opens (here a household's,
    /// refused by a trigger), the run without it neither locks nor reads that feed: the
    /// operation is refused and its neighbour applies.
    @Test(arguments: Driver.selected)
    func anOperationWhoseFeedTheDatabaseRefusesIsRejectedAlone(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            try await Self.plantRefusal(
                harness, named: "refuse_feed", on: "feeds", postgres: "NEW.scope = 'h:poison'", sqlite: "NEW.scope = 'h:poison'",
                code: "54000", message: "feed refused"
            )
            let results = try await harness.apply([Op.create("weightLogs", "w1", ["kg": 70]), Op.create("households", "poison", ["name": "Home"])])
            #expect(results.map(\.outcome) == ["applied", "VALIDATION_ERROR"], "\(results)")
            #expect(try await harness.pullAll().changes.map(\.entityID) == ["w1"])
        }
    }

    /// Makes the database refuse documents with a `poison` field, as it would a value the shared
    /// validation did not foresee.
    static func refusePoison(_ harness: StoreHarness) async throws {
        try await plantRefusal(
            harness, named: "refuse_poison", on: "entities", postgresEvents: "INSERT OR UPDATE", postgres: "NEW.data ? 'poison'",
            sqlite: "json_extract(NEW.data, '$.poison') IS NOT NULL", code: "22023", message: "poison refused"
        )
    }

    /// A trigger that makes the database refuse the rows of `table` its condition matches, with
    /// `message` (PostgreSQL: SQLSTATE `code`), as it would a value the validation did not foresee.
    static func plantRefusal(
        _ harness: StoreHarness, named name: String, on table: String, postgresEvents: String = "INSERT", postgres: String, sqlite: String,
        code: String, message: String
    ) async throws {
        switch harness.driver {
        case .postgres:
            if TestDatabases.citusWorkers != nil {
                // Citus creates a trigger on a distributed table's shards only when asked to.
                try await harness.execute(
                    "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET citus.enable_unsafe_triggers = on', current_database()); END $$"
                )
            }
            try await harness.execute("""
                CREATE FUNCTION \(name)() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN IF \(postgres) THEN RAISE EXCEPTION '\(message)' USING ERRCODE = '\(code)'; END IF; RETURN NEW; END $$
                """)
            try await harness.execute("CREATE TRIGGER \(name) BEFORE \(postgresEvents) ON \(table) FOR EACH ROW EXECUTE FUNCTION \(name)()")
        case .sqlite:
            try await harness.execute("""
                CREATE TRIGGER \(name) BEFORE INSERT ON \(table) WHEN \(sqlite)
                BEGIN SELECT RAISE(ABORT, '\(message)'); END
                """)
        }
    }

    /// A database error retrying cannot fix (SQLSTATE class 22, data exception, or 54, program
    /// limit) is classified permanent; connection and lock errors are not.
    @Test func databaseErrorClassesSayWhetherRetryingHelps() {
        #expect(PostgresFailure(operation: "t", code: "22003", message: "").isPermanentFailure)
        #expect(PostgresFailure(operation: "t", code: "54000", message: "").isPermanentFailure)
        for code in ["40001", "40P01", "23505", "53300", "57014", "08006"] {
            #expect(!PostgresFailure(operation: "t", code: code, message: "").isPermanentFailure, "\(code)")
        }
    }

    /// A stored document that does not parse is an error, never a tombstone.
    @Test(arguments: Driver.selected)
    func anUnreadableStoredDocumentFailsTheJobInsteadOfReadingAsDeleted(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            #expect(try await harness.apply([Op.create("weightLogs", "w1", ["kg": 70])]).map(\.outcome) == ["applied"])
            let corrupt = driver == .postgres ? "'\"not an object\"'::jsonb" : "'{not json'"
            try await harness.execute("UPDATE entities SET data = \(corrupt) WHERE entity_id = 'w1'")
            let id = try await harness.push([Op.update("weightLogs", "w1", base: 1, ["kg": 71])])
            try await harness.withWorkers(1, concurrency: 1) {
                let job = try await harness.waitFinished(id)
                #expect(job.state == .dead, "\(job.storedResults ?? "no results")")
                #expect(job.lastError?.contains("w1") == true, "\(job.lastError ?? "-")")
            }
        }
    }

    /// A queued payload that no longer decodes sends its job to `dead` alone, with a clear error;
    /// the jobs behind it (of other users) keep moving.
    @Test(arguments: Driver.selected)
    func anUndecodableJobPayloadGoesDeadAloneAndTheQueueMoves(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let poisoned = try await harness.push([Op.create("weightLogs", "p", ["kg": 1])], user: "mallory")
            try await harness.execute("UPDATE jobs SET payload = 'garbage{' WHERE id = \(poisoned)")
            let healthy = try await harness.push([Op.create("weightLogs", "h", ["kg": 1])], user: "alice")
            try await harness.withWorkers(1, concurrency: 1) {
                // Each in its first attempt: a lane stalled on the poisoned job until its lease ran
                // out would have had it rescued and claimed again (a second attempt).
                let done = try await harness.waitFinished(healthy, user: "alice")
                #expect(done.state == .done && done.attempts == 1, "\(done.state) after \(done.attempts)")
                let dead = try await harness.waitFinished(poisoned, user: "mallory")
                #expect(dead.state == .dead && dead.attempts == 1, "\(dead.state) after \(dead.attempts)")
                #expect(dead.lastError?.contains("payload") == true, "\(dead.lastError ?? "-")")
            }
        }
    }
}

extension StoredDataTests {
    /// U+0000 passes the front (it is valid JSON) but PostgreSQL cannot store it: the operation is
    /// refused on every driver alike, its neighbours apply, and the job never retries.
    @Test(arguments: Driver.selected)
    func aDocumentNoDriverCanStoreIsRefusedAloneAndTheJobFinishes(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let id = try await harness.push([
                Op.create("contacts", "good", ["name": "Ada"]),
                Op.create("contacts", "nul", ["name": "Ada\u{0}Lovelace"]),
                Op.create("inventory", "nul-key", ["n\u{0}": 1], household: "h"),
                Op.create("contacts", "after", ["name": "Grace"]),
            ])
            try await harness.withWorkers(1, concurrency: 1) {
                let job = try await harness.waitFinished(id)
                #expect(job.state == .done && job.attempts == 1)
                #expect(try job.decodedResults()?.map(\.outcome) == ["applied", "VALIDATION_ERROR", "VALIDATION_ERROR", "applied"])
            }
            #expect(try await harness.pullAll().changes.map(\.entityID) == ["good", "after"])
        }
    }
}
