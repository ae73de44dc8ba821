/// Item-level merging of the array an `items_merge` type names.
///
/// Items are matched by their id field; per item the copy with the later updated-at timestamp wins.
/// Items whose deleted-at field is set are dropped from the stored array and remembered as item
/// tombstones, so a stale copy of a deleted item does not come back.
enum ItemsMerge {
    enum Outcome<Value> {
        case success(Value)
        case failure(String)
    }

    /// The client's array replaces the stored one (b == v, or a create).
    static func replace(
        in document: inout JSONObject,
        items: EntityTypeConfig.ItemsConfig,
        tombstones: inout [String: Timestamp]
    ) -> Outcome<Void> {
        guard let value = document[items.path], !value.isNull else { return .success(()) }
        let incoming: [Item]
        switch parse(value, items: items) {
        case .success(let parsed): incoming = parsed
        case .failure(let message): return .failure(message)
        }
        var kept: [JSONValue] = []
        for item in incoming {
            if let deletedAt = item.deletedAt {
                tombstones[item.id] = max(tombstones[item.id] ?? deletedAt, deletedAt)
            } else {
                tombstones.removeValue(forKey: item.id)
                kept.append(item.value)
            }
        }
        document[items.path] = .array(kept)
        return .success(())
    }

    /// A stale client's array merged into the stored one.
    static func merge(
        stored: JSONValue?,
        incoming: JSONValue,
        items: EntityTypeConfig.ItemsConfig,
        tombstones: inout [String: Timestamp],
        storedFallback: Timestamp,
        incomingFallback: Timestamp,
        ties: EntityTypeConfig.TieBreak
    ) -> Outcome<JSONValue> {
        let storedItems: [Item]
        switch parse(stored ?? .array([]), items: items) {
        case .success(let parsed): storedItems = parsed
        // A stored array that no longer parses (rules changed) is replaced by the client's.
        case .failure: storedItems = []
        }
        let incomingItems: [Item]
        switch parse(incoming, items: items) {
        case .success(let parsed): incomingItems = parsed
        case .failure(let message): return .failure(message)
        }

        var order = storedItems.map(\.id)
        var winners: [String: Item] = [:]
        for item in storedItems { winners[item.id] = item }
        for item in incomingItems {
            if let deletedAt = item.deletedAt {
                tombstones[item.id] = max(tombstones[item.id] ?? deletedAt, deletedAt)
                continue
            }
            let incomingUpdated = item.updatedAt ?? incomingFallback
            if let existing = winners[item.id] {
                let storedUpdated = existing.updatedAt ?? storedFallback
                if incomingUpdated > storedUpdated || (incomingUpdated == storedUpdated && ties == .client) {
                    winners[item.id] = item
                }
            } else {
                winners[item.id] = item
                order.append(item.id)
            }
        }
        var result: [JSONValue] = []
        for id in order {
            guard let item = winners[id] else { continue }
            if let deletedAt = tombstones[id], deletedAt >= (item.updatedAt ?? storedFallback) { continue }
            result.append(item.value)
        }
        return .success(.array(result))
    }

    struct Item {
        var id: String
        var updatedAt: Timestamp?
        var deletedAt: Timestamp?
        var value: JSONValue
    }

    static func parse(_ value: JSONValue, items: EntityTypeConfig.ItemsConfig) -> Outcome<[Item]> {
        guard let array = value.arrayValue else {
            return .failure("field '\(items.path)' must be an array")
        }
        var parsed: [Item] = []
        var seen: Set<String> = []
        for (index, element) in array.enumerated() {
            guard let object = element.objectValue else {
                return .failure("field '\(items.path)[\(index)]' must be an object")
            }
            let id: String
            switch object[items.idField] {
            case .string(let text)?: id = text
            case .int(let number)?: id = String(number)
            default: return .failure("field '\(items.path)[\(index)].\(items.idField)' must be a string or an integer")
            }
            guard seen.insert(id).inserted else {
                return .failure("field '\(items.path)' holds the id '\(id)' twice")
            }
            let updatedAt = object[items.updatedAtField]?.stringValue.flatMap(Timestamp.init(rfc3339:))
            if let raw = object[items.updatedAtField], !raw.isNull, updatedAt == nil {
                return .failure("field '\(items.path)[\(index)].\(items.updatedAtField)' must be an RFC 3339 timestamp")
            }
            var deletedAt: Timestamp?
            if let raw = object[items.deletedAtField], !raw.isNull {
                guard let parsedDeletedAt = raw.stringValue.flatMap(Timestamp.init(rfc3339:)) else {
                    return .failure("field '\(items.path)[\(index)].\(items.deletedAtField)' must be an RFC 3339 timestamp")
                }
                deletedAt = parsedDeletedAt
            }
            parsed.append(Item(id: id, updatedAt: updatedAt, deletedAt: deletedAt, value: element))
        }
        return .success(parsed)
    }
}
