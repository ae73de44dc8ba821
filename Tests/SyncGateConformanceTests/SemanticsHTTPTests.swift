import Foundation
import SyncGateCore
import SyncGateWire
@testable import SyncGateStorage
import SyncGateTestSupport
import Testing

/// Every conflict policy, field rule and per-operation error code, end to end through HTTP.
@Suite(.timeLimit(.minutes(10))) struct SemanticsHTTPTests {
    static let early = Timestamp.now().adding(milliseconds: -3_600_000)
    static let middle = Timestamp.now().adding(milliseconds: -1_800_000)
    static let late = Timestamp.now().adding(milliseconds: -60_000)

    static func status(_ result: JSONValue) -> String {
        let status = result["status"]?.stringValue ?? "?"
        switch status {
        case "conflict": return result["resolution"]?.stringValue ?? "?"
        case "rejected": return result["error_code"]?.stringValue ?? "?"
        default: return status
        }
    }

    @Test(arguments: Driver.selected)
    func lastWriteWins(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            _ = try await http.results([Op.create("weightLogs", "w", ["kg": 70], at: Self.middle), Op.create("categories", "c", ["name": "A"], at: Self.middle)])
            let results = try await http.results([
                Op.update("weightLogs", "w", base: 0, ["kg": 60], at: Self.early),    // older: the server keeps its value
                Op.update("categories", "c", base: 0, ["name": "B"], at: Self.middle), // tie: categories say ties go to the client
                Op.update("weightLogs", "w", base: 0, ["kg": 71], at: Self.middle),   // tie: the server wins by default
                Op.update("weightLogs", "w", base: 0, ["kg": 72], at: Self.late),     // newer: the client wins
            ])
            #expect(results.map(Self.status) == ["server_wins", "client_wins", "server_wins", "client_wins"])
            #expect(results[0]["server_data"] == ["kg": 70] && results[0]["version"] == 1)
            #expect(results[3]["version"] == 2 && results[3]["server_data"] == nil)
            let state = try await http.state()
            #expect(state["weightLogs/w"]?["data"] == ["kg": 72])
            #expect(state["categories/c"]?["data"] == ["name": "B"])
        }
    }

    @Test(arguments: Driver.selected)
    func clientTimestampsFarAheadCountAsTheServerClock(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            // Stored with a timestamp two minutes ahead (within the allowed skew) ...
            _ = try await http.results([Op.create("weightLogs", "w", ["kg": 70], at: .now().adding(milliseconds: 120_000))])
            // ... a stale write from a clock an hour ahead is clamped to "now" and loses.
            let results = try await http.results([Op.update("weightLogs", "w", base: 0, ["kg": 1], at: .now().adding(milliseconds: 3_600_000))])
            #expect(results.map(Self.status) == ["server_wins"])
        }
    }

    @Test(arguments: Driver.selected)
    func clientWinsAndDeletesWin(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            _ = try await http.results([Op.create("recentFoods", "r", ["n": 1], at: Self.late), Op.create("weightLogs", "w", ["kg": 1])])
            _ = try await http.results([Op.delete("recentFoods", "r", base: 1), Op.delete("weightLogs", "w", base: 1)])
            let results = try await http.results([
                Op.update("recentFoods", "r", base: 1, ["n": 2], at: Self.early),  // client_wins revives a tombstone
                Op.update("weightLogs", "w", base: 1, ["kg": 2], at: .now()),     // lww: deletes win
                Op.create("weightLogs", "w", ["kg": 3]),                           // recreating a deleted id too
                Op.delete("weightLogs", "w", base: 2),
            ])
            #expect(results.map(Self.status) == ["client_wins", "server_wins", "server_wins", "server_wins"])
            #expect(results[1]["server_data"] == .null && results[1]["version"] == 2)
            let state = try await http.state()
            #expect(state["recentFoods/r"]?["data"] == ["n": 2] && state["recentFoods/r"]?["version"] == 3)
            #expect(state["weightLogs/w"]?["operation"] == "delete" && state["weightLogs/w"]?["data"] == .null)
        }
    }

    @Test(arguments: Driver.selected)
    func serverWins(_ driver: Driver) async throws {
        let collections = try Collections.parse(yaml: "types:\n  settings: {scope: user, policy: server_wins}", source: "test")
        try await HTTPHarness.with(driver, collections: collections) { http in
            _ = try await http.results([Op.create("settings", "s", ["theme": "dark"])])
            let results = try await http.results([
                Op.update("settings", "s", base: 0, ["theme": "light"], at: .now()),
                Op.update("settings", "s", base: 1, ["theme": "blue"]),
            ])
            #expect(results.map(Self.status) == ["server_wins", "applied"])
            #expect(results[0]["server_data"] == ["theme": "dark"])
        }
    }

    @Test(arguments: Driver.selected)
    func fieldMerge(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            _ = try await http.results([Op.create("userGoals", "g", ["calories": 2000, "protein": 100, "fat": 70], at: Self.early)])
            _ = try await http.results([Op.update("userGoals", "g", base: 1, ["calories": 1800], at: Self.middle)])  // phone
            let results = try await http.results([
                // tablet, still at version 1: protein is untouched since, calories conflicts and is older.
                Op.update("userGoals", "g", base: 1, ["calories": 2200, "protein": 120], at: Self.early),
                // a later conflicting edit of the same field wins it.
                Op.update("userGoals", "g", base: 1, ["calories": 1500], at: Self.late),
                Op.update("userGoals", "g", base: 1, ["fat": nil]),
            ])
            #expect(results.map(Self.status) == ["merged", "merged", "applied"])
            #expect(results[0]["data"] == ["calories": 1800, "protein": 120, "fat": 70])
            #expect(results[1]["data"] == ["calories": 1500, "protein": 120, "fat": 70])
            #expect(try await http.state()["userGoals/g"]?["data"] == ["calories": 1500, "protein": 120])
        }
    }

    @Test(arguments: Driver.selected)
    func itemsMergeOnFoodLogs(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            func item(_ id: String, _ calories: Int64, _ at: Timestamp, deleted: Timestamp? = nil) -> JSONValue {
                var object: JSONObject = ["id": .string(id), "name": .string(id), "calories": .int(calories), "updatedAt": .string(at.rfc3339)]
                if let deleted { object["deletedAt"] = .string(deleted.rfc3339) }
                return .object(object)
            }
            _ = try await http.results([Op.create("foodLogs", "fl", ["loggedDate": "2026-01-15", "mealType": "lunch", "items": [item("rice", 200, Self.early), item("soup", 100, Self.early)]], at: Self.early)])
            // Phone (at version 1) edits rice; tablet (also at version 1) adds bread and deletes soup.
            _ = try await http.results([Op.update("foodLogs", "fl", base: 1, ["items": [item("rice", 250, Self.middle), item("soup", 100, Self.early)]], at: Self.middle)])
            let results = try await http.results([
                Op.update("foodLogs", "fl", base: 1, ["mealType": "dinner", "items": [item("rice", 200, Self.early), item("bread", 80, Self.late), item("soup", 100, Self.early, deleted: Self.late)]], at: Self.late),
            ])
            #expect(results.map(Self.status) == ["merged"])
            #expect(results[0]["data"] == ["loggedDate": "2026-01-15", "mealType": "dinner", "items": [item("rice", 250, Self.middle), item("bread", 80, Self.late)]])
            #expect(results[0]["version"] == 3)
            // The summary follows the merged document.
            #expect(try await http.state()["dailySummaries/2026-01-15"]?["data"]?["calories"] == 330)
        }
    }

    @Test(arguments: Driver.selected)
    func fieldRulesAndPermanentErrors(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let results = try await http.results([
                Op.create("foodLogs", "f1", ["mealType": "lunch", "items": []]),
                Op.create("foodLogs", "f2", ["loggedDate": "15/01/2026", "mealType": "lunch"]),
                Op.create("foodLogs", "f3", ["loggedDate": "2026-01-15", "mealType": 3]),
                Op.create("foodLogs", "f4", ["loggedDate": "2026-01-15", "mealType": "lunch", "items": "none"]),
                Op.create("timeEntries", "t1", ["project_id": "p", "minutes": "ten"]),
                Op.create("timeEntries", "t2", ["minutes": 10]),
                Op.create("dailySummaries", "2026-01-15", ["calories": 1]),
                Op.create("nothingLikeThis", "x", [:]),
                Op.create("inventory", "i", ["qty": 1]),
                Op.create("weightLogs", "w", ["kg": 1], household: "h1"),
                Op.update("weightLogs", "missing", base: 1, ["kg": 1]),
                Op.delete("weightLogs", "missing", base: 1),
                Op.create("weightLogs", "w", ["kg": 1]),
                Op.update("weightLogs", "w", base: 2, ["kg": 2]),
            ])
            let expected: [(String, String?)] = [
                ("VALIDATION_ERROR", "field 'loggedDate' is required"),
                ("VALIDATION_ERROR", "field 'loggedDate' must be a date (YYYY-MM-DD)"),
                ("VALIDATION_ERROR", "field 'mealType' must be a string"),
                ("VALIDATION_ERROR", "field 'items' must be an array"),
                ("VALIDATION_ERROR", "field 'minutes' must be a number"),
                ("VALIDATION_ERROR", "field 'project_id' is required"),
                ("PERMISSION_DENIED", "entity type 'dailySummaries' is read-only"),
                ("VALIDATION_ERROR", "unknown entity type 'nothingLikeThis'"),
                ("VALIDATION_ERROR", "household_id is required for the household-scoped type 'inventory'"),
                ("VALIDATION_ERROR", "household_id must be null for the user-scoped type 'weightLogs'"),
                ("ENTITY_NOT_FOUND", nil),
                ("ENTITY_NOT_FOUND", nil),
                ("applied", nil),
                ("VALIDATION_ERROR", "base_version 2 is ahead of the server's version 1"),
            ]
            #expect(results.map(Self.status) == expected.map(\.0))
            for (result, (_, message)) in zip(results, expected) where message != nil {
                #expect(result["error_message"]?.stringValue == message)
                #expect(result["retryable"] == false)
            }
            // Rejected operations changed nothing.
            #expect(try await http.state().keys.sorted() == ["weightLogs/w"])
        }
    }

    @Test(arguments: Driver.selected)
    func parentArchivedRule(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            _ = try await http.results([Op.create("projects", "p1", ["name": "Website"]), Op.create("timeEntries", "t1", ["project_id": "p1", "minutes": 30])])
            let results = try await http.results([
                Op.update("projects", "p1", base: 1, ["archived": true]),
                Op.create("timeEntries", "t2", ["project_id": "p1", "minutes": 15]),
                Op.update("timeEntries", "t1", base: 1, ["minutes": 45]),
                Op.create("timeEntries", "t3", ["project_id": "p2", "minutes": 15]),
            ])
            #expect(results.map(Self.status) == ["applied", "PROJECT_ARCHIVED", "PROJECT_ARCHIVED", "applied"])
            #expect(results[1]["error_message"] == "projects 'p1' is archived")
        }
    }

    @Test(arguments: Driver.selected)
    func duplicatesAnswerTheEarlierVersion(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let create = Op.create("weightLogs", "w", ["kg": 1], key: "same-key")
            #expect(try await http.results([create]).map(Self.status) == ["applied"])
            #expect(try await http.results([Op.update("weightLogs", "w", base: 1, ["kg": 2])]).map(Self.status) == ["applied"])
            let replay = try await http.results([create], device: "other-device")
            #expect(replay.map(Self.status) == ["duplicate"])
            #expect(replay[0]["version"] == 1)
        }
    }

    @Test(arguments: Driver.selected)
    func dailySummariesFollowFoodLogs(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            func log(_ date: String, _ items: [JSONValue]) -> JSONObject {
                ["loggedDate": .string(date), "mealType": "lunch", "items": .array(items)]
            }
            let rice: JSONValue = ["id": "rice", "calories": 200, "protein": 4.5, "carbs": 44, "fat": 0.5]
            let egg: JSONValue = ["id": "egg", "calories": 78, "protein": 6.3, "carbs": 0.6, "fat": 5.3]
            _ = try await http.results([Op.create("foodLogs", "a", log("2026-01-15", [rice, egg])), Op.create("foodLogs", "b", log("2026-01-15", [egg]))])
            var state = try await http.state()
            #expect(state["dailySummaries/2026-01-15"]?["data"] == ["date": "2026-01-15", "calories": 356, "protein": 17.1, "carbs": 45.2, "fat": 11.1, "meal_count": 2, "item_count": 3])

            // Moving a log to another day updates both days.
            _ = try await http.results([Op.update("foodLogs", "b", base: 1, ["loggedDate": "2026-01-16"])])
            state = try await http.state()
            #expect(state["dailySummaries/2026-01-15"]?["data"]?["calories"] == 278)
            #expect(state["dailySummaries/2026-01-16"]?["data"]?["calories"] == 78)

            // A day without logs loses its summary.
            _ = try await http.results([Op.delete("foodLogs", "b", base: 2)])
            state = try await http.state()
            #expect(state["dailySummaries/2026-01-16"]?["operation"] == "delete")
            #expect(state["dailySummaries/2026-01-15"]?["version"] == 2)
            // Another user's food never counts.
            _ = try await http.results([Op.create("foodLogs", "x", log("2026-01-15", [rice]))], user: "bob")
            #expect(try await http.state()["dailySummaries/2026-01-15"]?["data"]?["calories"] == 278)
        }
    }

    @Test(arguments: Driver.selected)
    func recomputeSummariesRebuildsOnlyWhatChanged(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            _ = try await http.results([
                Op.create("foodLogs", "a", ["loggedDate": "2026-01-15", "mealType": "lunch", "items": [["id": "x", "calories": 100]]]),
                Op.create("foodLogs", "b", ["loggedDate": "2026-02-01", "mealType": "lunch", "items": [["id": "y", "calories": 50]]]),
            ])
            let store = http.store.store
            let collections = http.store.collections
            // Nothing to do: everything is current.
            let first = try await store.recomputeDerived(userID: nil, from: nil, through: nil, collections: collections, now: .now())
            #expect(first == DerivationReport(groupsChecked: 2, written: 0))
            // Corrupt one summary behind the server's back; recompute restores it, once.
            try await http.store.corruptSummary(user: "alice", day: "2026-01-15")
            let fixed = try await store.recomputeDerived(userID: "alice", from: "2026-01-01", through: "2026-01-31", collections: collections, now: .now())
            #expect(fixed == DerivationReport(groupsChecked: 1, written: 1))
            #expect(try await http.state()["dailySummaries/2026-01-15"]?["data"]?["calories"] == 100)
            let again = try await store.recomputeDerived(userID: "alice", from: nil, through: nil, collections: collections, now: .now())
            #expect(again.written == 0)
        }
    }
}

extension StoreHarness {
    /// Overwrites a stored summary directly, as a bug or a manual edit might.
    func corruptSummary(user: String, day: String) async throws {
        try await execute("UPDATE entities SET data = '{\"calories\": 1}' WHERE scope = 'u:\(user)' AND entity_type = 'dailySummaries' AND entity_id = '\(day)'")
    }
}
