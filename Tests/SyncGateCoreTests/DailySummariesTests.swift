import Testing

@testable import SyncGateCore

@Suite struct DailySummariesTests {
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
    }

    @Test func aDayWithoutLogsHasNoSummary() {
        #expect(DailySummaries.summarize(date: "2026-01-15", logs: []) == nil)
    }

    @Test func planWritesOnlyChangedDays() {
        let userScope = EntityKey(scope: .user("u"), entityType: "dailySummaries", entityID: "2026-01-15")
        let existingSame = EntityState(
            key: userScope, version: 2,
            data: DailySummaries.summarize(date: "2026-01-15", logs: [Self.log("2026-01-15", [Self.item(100)])]),
            clientTimestamp: Fixture.now, updatedAt: Fixture.now
        )
        var stale = existingSame
        stale.key.entityID = "2026-01-16"
        stale.data?["date"] = "2026-01-16"
        stale.data?["calories"] = 5
        var tombstone = stale
        tombstone.key.entityID = "2026-01-17"
        tombstone.data = nil

        let writes = DailySummaries.plan(
            days: ["2026-01-15", "2026-01-16", "2026-01-17", "2026-01-18"],
            logs: [Self.log("2026-01-15", [Self.item(100)]), Self.log("2026-01-18", [Self.item(7)]), Self.log("2026-01-19", [Self.item(1)])],
            existing: ["2026-01-15": existingSame, "2026-01-16": stale, "2026-01-17": tombstone],
            userID: "u",
            now: Fixture.now
        )
        // 15: unchanged. 16: no logs left → tombstone v3. 17: still none → nothing. 18: new → v1. 19: not asked for.
        #expect(writes.map(\.key.entityID) == ["2026-01-16", "2026-01-18"])
        #expect(writes[0].isDeleted && writes[0].version == 3)
        #expect(writes[1].version == 1 && writes[1].data?["calories"] == 7)
    }

    static func stored(_ type: String, _ id: String, _ data: JSONObject?, version: Int64 = 1) -> EntityState {
        EntityState(
            key: EntityKey(scope: .user("u"), entityType: type, entityID: id), version: version, data: data,
            clientTimestamp: Fixture.now, updatedAt: Fixture.now
        )
    }

    @Test func partitionSplitsLiveLogsFromSummariesByDay() {
        let live = Self.stored("foodLogs", "a", Self.log("2026-01-15", [Self.item(1)]))
        let deleted = Self.stored("foodLogs", "b", nil)
        let summary = Self.stored("dailySummaries", "2026-01-15", ["calories": 1])
        let gone = Self.stored("dailySummaries", "2026-01-14", nil)
        let (logs, summaries) = DailySummaries.partition([live, deleted, summary, gone])
        #expect(logs == [live.key: live.data!])
        #expect(summaries == ["2026-01-15": summary, "2026-01-14": gone])
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
        let (checked, writes) = DailySummaries.rebuild(stored: stored, userID: "u", now: Fixture.now)
        #expect(checked == 2)
        #expect(writes.map(\.key.entityID) == ["2026-01-15", "2026-01-16"])
        #expect(writes[0].data?["calories"] == 120 && writes[0].data?["meal_count"] == 2 && writes[0].version == 1)
        #expect(writes[1].isDeleted && writes[1].version == 5)
        // Rebuilding what it wrote changes nothing.
        let (_, again) = DailySummaries.rebuild(stored: stored.filter { $0.key.entityType == "foodLogs" } + writes, userID: "u", now: Fixture.now)
        #expect(again.isEmpty)
    }

    @Test(arguments: [("2026-01-15", "2026-01-15" as String?), ("2026-1-15", nil), ("garbage", nil)])
    func dayOfALogRequiresAValidDate(_ value: String, _ expected: String?) {
        #expect(DailySummaries.day(of: ["loggedDate": .string(value)]) == expected)
    }
}
