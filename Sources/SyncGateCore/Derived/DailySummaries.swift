package import SyncGateWire
/// Server-derived daily nutrition totals (`dailySummaries`, entity id `YYYY-MM-DD`), fed by `foodLogs`.
///
/// A day's summary sums `calories`, `protein`, `carbs` and `fat` over the non-deleted items of the
/// user's non-deleted `foodLogs` whose `loggedDate` is that day; `meal_count` counts those logs and
/// `item_count` their items. Totals are rounded to two decimals. A day with no logs has no summary.
package struct DailySummaries: Derivation {
    package static let sourceTypeName = "foodLogs"
    package static let derivedTypeName = "dailySummaries"
    package static let dateField = "loggedDate"
    package static let nutrients = ["calories", "protein", "carbs", "fat"]

    /// Where the items live in a food log (the `foodLogs` type's `items` setting).
    package var items: EntityTypeConfig.ItemsConfig = .init()

    package var sourceType: String { Self.sourceTypeName }
    package var derivedType: String { Self.derivedTypeName }

    /// A food log counts towards its `loggedDate`, when that is a valid date.
    package func groupKey(of document: JSONObject) -> String? {
        Self.day(of: document)
    }

    package func derive(group: String, members: [JSONObject]) -> JSONObject? {
        Self.summarize(date: group, logs: members, items: items)
    }

    /// The day a food log counts towards, if it has a valid `loggedDate`.
    package static func day(of document: JSONObject?) -> String? {
        guard let text = document?[dateField]?.stringValue, CalendarDate(iso8601: text) != nil else { return nil }
        return text
    }

    /// The summary document for `date` over the given live food-log documents; `nil` when there are none.
    package static func summarize(date: String, logs: [JSONObject], items: EntityTypeConfig.ItemsConfig = .init()) -> JSONObject? {
        guard !logs.isEmpty else { return nil }
        var totals = [Double](repeating: 0, count: nutrients.count)
        var itemCount: Int64 = 0
        for log in logs {
            for item in log[items.path]?.arrayValue ?? [] {
                guard let object = item.objectValue else { continue }
                if let deletedAt = object[items.deletedAtField], !deletedAt.isNull { continue }
                itemCount += 1
                for (index, nutrient) in nutrients.enumerated() {
                    // Saturating: a total past the largest double stays there (an infinity
                    // would be written as 0, a day's total that contradicts its items).
                    let sum = totals[index] + (object[nutrient]?.numberValue ?? 0)
                    totals[index] = sum.isFinite ? sum : (sum > 0 ? .greatestFiniteMagnitude : -.greatestFiniteMagnitude)
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
        // Past ~1.8e306 the hundredths overflow (and two decimals mean nothing): the value as it is.
        guard hundredths.isFinite else { return .double(value) }
        if hundredths.truncatingRemainder(dividingBy: 100) == 0, let whole = Int64(exactly: hundredths / 100) {
            return .int(whole)
        }
        return .double(hundredths / 100)
    }
}
