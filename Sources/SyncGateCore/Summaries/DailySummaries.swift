/// Server-derived daily nutrition totals (`dailySummaries`, entity id `YYYY-MM-DD`).
///
/// A day's summary sums `calories`, `protein`, `carbs` and `fat` over the non-deleted items of the
/// user's non-deleted `foodLogs` whose `loggedDate` is that day; `meal_count` counts those logs and
/// `item_count` their items. Totals are rounded to two decimals. A day with no logs has no summary.
public enum DailySummaries {
    public static let sourceType = "foodLogs"
    public static let summaryType = "dailySummaries"
    public static let dateField = "loggedDate"
    public static let nutrients = ["calories", "protein", "carbs", "fat"]

    /// The day a food log counts towards, if it has a valid `loggedDate`.
    public static func day(of document: JSONObject?) -> String? {
        guard let text = document?[dateField]?.stringValue, CalendarDate(iso8601: text) != nil else { return nil }
        return text
    }

    /// The summary document for `date` over the given live food-log documents; `nil` when there are none.
    public static func summarize(date: String, logs: [JSONObject], items: EntityTypeConfig.ItemsConfig = .init()) -> JSONObject? {
        guard !logs.isEmpty else { return nil }
        var totals = [Double](repeating: 0, count: nutrients.count)
        var itemCount: Int64 = 0
        for log in logs {
            for item in log[items.path]?.arrayValue ?? [] {
                guard let object = item.objectValue else { continue }
                if let deletedAt = object[items.deletedAtField], !deletedAt.isNull { continue }
                itemCount += 1
                for (index, nutrient) in nutrients.enumerated() {
                    totals[index] += object[nutrient]?.numberValue ?? 0
                }
            }
        }
        var summary: JSONObject = [
            "date": .string(date),
            "meal_count": .int(Int64(logs.count)),
            "item_count": .int(itemCount),
        ]
        for (index, nutrient) in nutrients.enumerated() {
            summary[nutrient] = rounded(totals[index])
        }
        return summary
    }

    /// Two decimals; whole numbers stay integers so totals read naturally (`1250`, not `1250.0`).
    static func rounded(_ value: Double) -> JSONValue {
        guard value.isFinite else { return .int(0) }
        let hundredths = (value * 100).rounded()
        if hundredths.truncatingRemainder(dividingBy: 100) == 0, let whole = Int64(exactly: hundredths / 100) {
            return .int(whole)
        }
        return .double(hundredths / 100)
    }

    /// Stored `foodLogs` and `dailySummaries` rows, split into the inputs of ``plan``: the live log
    /// documents by key, and the summaries (live or tombstoned) by day.
    public static func partition(_ stored: some Sequence<EntityState>) -> (logs: [EntityKey: JSONObject], summaries: [String: EntityState]) {
        var logs: [EntityKey: JSONObject] = [:]
        var summaries: [String: EntityState] = [:]
        for state in stored {
            if state.key.entityType == summaryType {
                summaries[state.key.entityID] = state
            } else if let data = state.data {
                logs[state.key] = data
            }
        }
        return (logs, summaries)
    }

    /// A rebuild from stored rows (`syncgate admin recompute-summaries`): every day with a live log
    /// or a live summary (which goes when its logs are gone) is recomputed.
    ///
    /// - Parameter stored: the user's food logs and summaries in the rebuilt range.
    /// - Returns: how many days were checked, and the writes for those whose totals changed.
    public static func rebuild(
        stored: some Sequence<EntityState>,
        userID: String,
        items: EntityTypeConfig.ItemsConfig = .init(),
        now: Timestamp
    ) -> (daysChecked: Int, writes: [EntityState]) {
        let (logs, summaries) = partition(stored)
        let days = Set(logs.values.compactMap(day(of:))).union(summaries.filter { !$0.value.isDeleted }.keys)
        let writes = plan(
            days: days, logs: logs.keys.sorted().compactMap { logs[$0] }, existing: summaries,
            userID: userID, items: items, now: now
        )
        return (days.count, writes)
    }

    /// The summary writes a set of changed days needs.
    ///
    /// - Parameters:
    ///   - days: the days whose logs changed.
    ///   - logs: every live food log of the user on those days, as it will be after the job commits.
    ///   - existing: the stored summaries of those days (live or tombstoned).
    /// - Returns: new summary versions (or tombstones) for the days whose totals changed; nothing for the rest.
    public static func plan(
        days: Set<String>,
        logs: [JSONObject],
        existing: [String: EntityState],
        userID: String,
        items: EntityTypeConfig.ItemsConfig = .init(),
        now: Timestamp
    ) -> [EntityState] {
        var logsByDay: [String: [JSONObject]] = [:]
        for log in logs {
            if let day = day(of: log), days.contains(day) { logsByDay[day, default: []].append(log) }
        }
        var writes: [EntityState] = []
        for day in days.sorted() {
            let summary = summarize(date: day, logs: logsByDay[day] ?? [], items: items)
            let current = existing[day]
            // Unchanged totals (or still no logs) write nothing.
            guard summary != current?.data else { continue }
            writes.append(
                EntityState(
                    key: EntityKey(scope: .user(userID), entityType: summaryType, entityID: day),
                    version: (current?.version ?? 0) + 1,
                    data: summary,
                    clientTimestamp: now,
                    updatedAt: now
                )
            )
        }
        return writes
    }
}
