package import SyncGateWire
/// Checks a document, as it would be stored, against its type's field rules.
package enum FieldRules {
    /// The first violated rule as a client-facing message, or `nil` when the document passes.
    package static func violation(in document: JSONObject, of type: EntityTypeConfig) -> String? {
        for rule in type.fields {
            guard let value = document[rule.name], !value.isNull else {
                if rule.required { return "field '\(rule.name)' is required" }
                continue
            }
            if !matches(value, rule.type) {
                return "field '\(rule.name)' must be \(describe(rule.type))"
            }
        }
        return nil
    }

    package static func matches(_ value: JSONValue, _ type: EntityTypeConfig.FieldType) -> Bool {
        switch type {
        case .string: return value.stringValue != nil
        case .number: return value.numberValue != nil
        case .integer: return value.integerValue != nil
        case .boolean: return value.boolValue != nil
        case .object: return value.objectValue != nil
        case .array: return value.arrayValue != nil
        case .date: return value.stringValue.flatMap(CalendarDate.init(iso8601:)) != nil
        case .timestamp: return value.stringValue.flatMap(Timestamp.init(rfc3339:)) != nil
        }
    }

    static func describe(_ type: EntityTypeConfig.FieldType) -> String {
        switch type {
        case .string: return "a string"
        case .number: return "a number"
        case .integer: return "an integer"
        case .boolean: return "a boolean"
        case .object: return "an object"
        case .array: return "an array"
        case .date: return "a date (YYYY-MM-DD)"
        case .timestamp: return "an RFC 3339 timestamp"
        }
    }
}
