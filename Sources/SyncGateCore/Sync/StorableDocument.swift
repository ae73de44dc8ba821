package import SyncGateWire
/// What a stored document may hold, checked in the decision every driver shares, so an operation
/// one database could not store is refused on all of them alike — per operation, never failing
/// the rest of its job.
package enum StorableDocument {
    /// The first reason `document` cannot be stored, or `nil`.
    ///
    /// U+0000 (NUL): PostgreSQL's `jsonb` refuses it in any string or key.
    package static func violation(in document: JSONObject) -> String? {
        for (key, value) in document {
            if key.unicodeScalars.contains("\u{0}") { return "a field name holds the character U+0000, which cannot be stored" }
            if let reason = violation(in: value, path: key) { return reason }
        }
        return nil
    }

    static func violation(in value: JSONValue, path: String) -> String? {
        switch value {
        case .string(let text):
            return text.unicodeScalars.contains("\u{0}") ? "field '\(path)' holds the character U+0000, which cannot be stored" : nil
        case .array(let items):
            for (index, item) in items.enumerated() {
                if let reason = violation(in: item, path: "\(path)[\(index)]") { return reason }
            }
            return nil
        case .object(let members):
            for (key, member) in members {
                if key.unicodeScalars.contains("\u{0}") { return "a field name in '\(path)' holds the character U+0000, which cannot be stored" }
                if let reason = violation(in: member, path: "\(path).\(key)") { return reason }
            }
            return nil
        case .null, .bool, .int, .double:
            return nil
        }
    }
}
