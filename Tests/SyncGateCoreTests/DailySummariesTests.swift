import Testing

@testable import SyncGateCore
import SyncGateWire

@Suite(.timeLimit(.minutes(10))) struct DailySummariesTests {
    static func log(_ date: String, _ items: [JSONValue]) -> JSONObject {
        ["loggedDate": .string(date), "mealType": "lunch", "items": .array(items)]
    }

    static func item(_ calories: JSONValue, protein: JSONValue = 1, carbs: JSONValue = 2, fat: JSONValue = 0.5, deleted: Bool = false) -> JSONValue {
        var object: JSONObject = ["id": "i", "calories": calories, "protein": protein, "carbs": carbs, "fat": fat]
        if deleted { object["deletedAt"] = "2026-01-15T10:00:00Z" }
        return .object(object)
    }

    @Test func sumsLiveItemsOfLiveLogs() {
        let logs = [
            Self.log("2026-01-15", [Self.item(100), Self.item(250.25, protein: 10.1), Self.item(999, deleted: true)]),
            Self.log("2026-01-15", [Self.item(50, fat: nil)]),
        ]
        let summary = DailySummaries.summarize(date: "2026-01-15", logs: logs)
        #expect(
            summary == [
                "date": "2026-01-15", "calories": 400.25, "protein": 12.1, "carbs": 6, "fat": 1,
                "meal_count": 2, "item_count": 3,
            ]
        )
    }

    @Test func missingAndNonNumericNutrientsCountAsZero() {
        let logs = [Self.log("2026-01-15", [.object(["id": "x"]), Self.item("lots"), .string("not an item")])]
        let summary = DailySummaries.summarize(date: "2026-01-15", logs: logs)
        #expect(summary?["calories"] == 0)
        #expect(summary?["item_count"] == 2)
        #expect(summary?["protein"] == 1)
    }

    @Test func roundsToTwoDecimals() {
        #expect(DailySummaries.rounded(0.1 + 0.2) == .double(0.3))
        #expect(DailySummaries.rounded(1.005) == .int(1))
        #expect(DailySummaries.rounded(2.0000001) == .int(2))
        #expect(DailySummaries.rounded(-3.456) == .double(-3.46))
        // Finite values whose hundredths overflow stay finite (an infinity would be written as
        // null, and differ from the stored summary at every touch).
        #expect(DailySummaries.rounded(1e307) == .double(1e307))
        #expect(DailySummaries.rounded(-1.7e308) == .double(-1.7e308))
        // Totals that would overflow saturate at the largest double, and later items count on.
        let huge = DailySummaries.summarize(date: "2026-01-15", logs: [["items": [["id": "a", "calories": 1e308], ["id": "b", "calories": 1e308]]]])
        #expect(huge?["calories"] == .double(.greatestFiniteMagnitude))
        let back = DailySummaries.summarize(date: "2026-01-15", logs: [["items": [["id": "a", "calories": 1e308], ["id": "b", "calories": 1e308], ["id": "c", "calories": -1e308]]]])
        #expect(back?["calories"] == .double(.greatestFiniteMagnitude - 1e308))
        let negative = DailySummaries.summarize(date: "2026-01-15", logs: [["items": [["id": "a", "fat": -1e308], ["id": "b", "fat": -1e308]]]])
        #expect(negative?["fat"] == .double(-.greatestFiniteMagnitude))
    }

    @Test func aDayWithoutLogsHasNoSummary() {
        #expect(DailySummaries.summarize(date: "2026-01-15", logs: []) == nil)
    }

    static func stored(_ type: String, _ id: String, _ data: JSONObject?, version: Int64 = 1) -> EntityState {
        EntityState(
            key: EntityKey(scope: .user("u"), entityType: type, entityID: id), version: version, data: data,
            clientTimestamp: Fixture.now, updatedAt: Fixture.now
        )
    }

    static func groups(_ days: String...) -> Set<DerivedGroup> {
        Set(days.map { DerivedGroup(scope: .user("u"), key: $0) })
    }

    @Test func planWritesOnlyChangedDays() {
        let same = Self.stored("dailySummaries", "2026-01-15", DailySummaries.summarize(date: "2026-01-15", logs: [Self.log("2026-01-15", [Self.item(100)])]), version: 2)
        let stale = Self.stored("dailySummaries", "2026-01-16", ["date": "2026-01-16", "calories": 5], version: 2)
        let tombstone = Self.stored("dailySummaries", "2026-01-17", nil, version: 2)
        let logs = [
            Self.stored("foodLogs", "a", Self.log("2026-01-15", [Self.item(100)])),
            Self.stored("foodLogs", "b", Self.log("2026-01-18", [Self.item(7)])),
            Self.stored("foodLogs", "c", Self.log("2026-01-19", [Self.item(1)])),
        ]
        let writes = DailySummaries().plan(
            groups: Self.groups("2026-01-15", "2026-01-16", "2026-01-17", "2026-01-18"),
            stored: logs + [same, stale, tombstone],
            now: Fixture.now
        )
        // 15: unchanged. 16: no logs left → tombstone v3. 17: still none → nothing. 18: new → v1. 19: not asked for.
        #expect(writes.map(\.key.entityID) == ["2026-01-16", "2026-01-18"])
        #expect(writes[0].isDeleted && writes[0].version == 3)
        #expect(writes[1].version == 1 && writes[1].data?["calories"] == 7)
    }

    /// The batch's writes replace the stored members: a log moved to another day leaves its old group.
    @Test func planUsesTheBatchsWritesOverStoredMembers() {
        let before = Self.stored("foodLogs", "a", Self.log("2026-01-15", [Self.item(100)]))
        var moved = before
        moved.data?["loggedDate"] = "2026-01-16"
        moved.version = 2
        let summary = Self.stored("dailySummaries", "2026-01-15", DailySummaries.summarize(date: "2026-01-15", logs: [before.data!]))
        let derivation = DailySummaries()
        let groups = derivation.groupsTouched(by: [moved], original: [before.key: before])
        #expect(groups == Self.groups("2026-01-15", "2026-01-16"))
        let writes = derivation.plan(groups: groups, stored: [before, summary], writes: [moved], now: Fixture.now)
        #expect(writes.map(\.key.entityID) == ["2026-01-15", "2026-01-16"])
        #expect(writes[0].isDeleted && writes[0].version == 2)
        #expect(writes[1].data?["calories"] == 100 && writes[1].version == 1)
    }

    /// Only live documents of the source type with a valid date are members; tombstones have no group.
    @Test func storedGroupKeysBelongToLiveSourceDocumentsOnly() {
        let derivation = DailySummaries()
        #expect(derivation.storedGroupKey(of: Self.stored("foodLogs", "a", Self.log("2026-01-15", []))) == "2026-01-15")
        #expect(derivation.storedGroupKey(of: Self.stored("foodLogs", "b", nil)) == nil)
        #expect(derivation.storedGroupKey(of: Self.stored("foodLogs", "c", Self.log("2026-02-30", []))) == nil)
        #expect(derivation.storedGroupKey(of: Self.stored("weightLogs", "d", Self.log("2026-01-15", []))) == nil)
    }

    /// What the apply loads for the touched groups: their members by group key and their summaries by id.
    @Test func inputsAreOneGroupQueryAndOneKeyQueryPerScope() {
        let inputs = DailySummaries().inputs(for: Self.groups("2026-01-16", "2026-01-15"))
        #expect(inputs == [
            .groupMembers(scope: .user("u"), type: "foodLogs", groups: ["2026-01-15", "2026-01-16"]),
            .keys([
                EntityKey(scope: .user("u"), entityType: "dailySummaries", entityID: "2026-01-15"),
                EntityKey(scope: .user("u"), entityType: "dailySummaries", entityID: "2026-01-16"),
            ]),
        ])
    }

    @Test func rebuildChecksDaysWithALiveLogOrALiveSummary() {
        let stored = [
            Self.stored("foodLogs", "a", Self.log("2026-01-15", [Self.item(100)])),
            Self.stored("foodLogs", "b", Self.log("2026-01-15", [Self.item(20)])),
            Self.stored("foodLogs", "c", nil),
            // 16: a live summary whose logs are gone → a tombstone. 17: already a tombstone → not checked.
            Self.stored("dailySummaries", "2026-01-16", ["date": "2026-01-16", "calories": 9], version: 4),
            Self.stored("dailySummaries", "2026-01-17", nil, version: 2),
        ]
        let (checked, writes) = DailySummaries().rebuild(stored: stored, now: Fixture.now)
        #expect(checked == 2)
        #expect(writes.map(\.key.entityID) == ["2026-01-15", "2026-01-16"])
        #expect(writes[0].data?["calories"] == 120 && writes[0].data?["meal_count"] == 2 && writes[0].version == 1)
        #expect(writes[1].isDeleted && writes[1].version == 5)
        // Rebuilding what it wrote changes nothing.
        let (_, again) = DailySummaries().rebuild(stored: stored.filter { $0.key.entityType == "foodLogs" } + writes, now: Fixture.now)
        #expect(again.isEmpty)
    }

    @Test(arguments: [("2026-01-15", "2026-01-15" as String?), ("2026-1-15", nil), ("garbage", nil)])
    func dayOfALogRequiresAValidDate(_ value: String, _ expected: String?) {
        #expect(DailySummaries.day(of: ["loggedDate": .string(value)]) == expected)
    }
}
