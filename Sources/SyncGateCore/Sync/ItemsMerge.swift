import SyncGateWire
/// Item-level merging of the array an `items_merge` type names.
///
/// Items are matched by their id field; per item the copy with the later updated-at timestamp wins.
/// An item without one counts as written when the operation that wrote it was; that time is kept in
/// the entity's metadata while the item is stored, so a later merge compares against it (not the
/// entity's latest time) and the result does not depend on the order pushes arrive in.
/// Items whose deleted-at field is set are dropped from the stored array and remembered as item
/// tombstones, so a stale copy of a deleted item does not come back.
/// An item's times come from clients: one more than five minutes ahead of the server counts as
/// the server's clock, as an operation's does (``ConflictResolver/effectiveTimestamp(_:now:)``),
/// and the time it counted as is kept in the metadata beside the item's own field.
enum ItemsMerge {
    enum Outcome<Value> {
        case success(Value)
        case failure(String)
    }

    /// The client's array replaces the stored one (b == v, or a create) at the operation's `timestamp`.
    static func replace(
        in document: inout JSONObject,
        items: EntityTypeConfig.ItemsConfig,
        meta: inout EntityMeta,
        timestamp: Timestamp,
        now: Timestamp
    ) -> Outcome<Void> {
        guard let value = document[items.path], !value.isNull else { return .success(()) }
        let incoming: [Item]
        switch parse(value, items: items, now: now) {
        case .success(let parsed): incoming = parsed
        case .failure(let message): return .failure(message)
        }
        var kept: [JSONValue] = []
        var times: [String: Timestamp] = [:]
        for item in incoming {
            if let deletedAt = item.deletedAt {
                meta.itemTombstones[item.id] = max(meta.itemTombstones[item.id] ?? deletedAt, deletedAt)
            } else {
                meta.itemTombstones.removeValue(forKey: item.id)
                kept.append(item.value)
                if let time = item.recordedTime(fallback: timestamp) { times[item.id] = time }
            }
        }
        document[items.path] = .array(kept)
        meta.itemTimes = times
        return .success(())
    }

    /// A stale client's array merged into the stored one.
    ///
    /// - Parameters:
    ///   - storedFallback: the time of a stored item with neither an updated-at field nor a recorded
    ///     time (stored before item times were recorded): the entity's client timestamp.
    ///   - incomingFallback: the operation's timestamp, the time of its items without an updated-at field.
    static func merge(
        stored: JSONValue?,
        incoming: JSONValue,
        items: EntityTypeConfig.ItemsConfig,
        meta: inout EntityMeta,
        storedFallback: Timestamp,
        incomingFallback: Timestamp,
        ties: EntityTypeConfig.TieBreak,
        now: Timestamp
    ) -> Outcome<JSONValue> {
        let storedItems: [Item]
        switch parse(stored ?? .array([]), items: items, now: now) {
        case .success(let parsed): storedItems = parsed
        // A stored array that no longer parses (rules changed) is replaced by the client's.
        case .failure: storedItems = []
        }
        let incomingItems: [Item]
        switch parse(incoming, items: items, now: now) {
        case .success(let parsed): incomingItems = parsed
        case .failure(let message): return .failure(message)
        }

        var order = storedItems.map(\.id)
        var winners: [String: Item] = [:]
        // Each item's time: the time recorded for it (written without an updated-at field, or
        // with one too far ahead), else its updated-at field.
        var times: [String: Timestamp] = [:]
        for item in storedItems {
            winners[item.id] = item
            times[item.id] = meta.itemTimes[item.id] ?? item.updatedAt ?? storedFallback
        }
        for item in incomingItems {
            if let deletedAt = item.deletedAt {
                meta.itemTombstones[item.id] = max(meta.itemTombstones[item.id] ?? deletedAt, deletedAt)
                continue
            }
            let incomingUpdated = item.updatedAt ?? incomingFallback
            if let storedUpdated = times[item.id] {
                if incomingUpdated > storedUpdated || (incomingUpdated == storedUpdated && ties == .client) {
                    winners[item.id] = item
                    times[item.id] = incomingUpdated
                }
            } else {
                winners[item.id] = item
                times[item.id] = incomingUpdated
                order.append(item.id)
            }
        }
        var result: [JSONValue] = []
        var kept: [String: Timestamp] = [:]
        for id in order {
            guard let item = winners[id], let time = times[id] else { continue }
            if let deletedAt = meta.itemTombstones[id], deletedAt >= time { continue }
            result.append(item.value)
            if item.updatedAt == nil || item.clamped || item.updatedAt != time { kept[id] = time }
        }
        meta.itemTimes = kept
        return .success(.array(result))
    }

    struct Item {
        var id: String
        /// The updated-at and deleted-at fields, each clamped to the server's clock
        /// (``ConflictResolver/effectiveTimestamp(_:now:)``).
        var updatedAt: Timestamp?
        var deletedAt: Timestamp?
        /// Whether the updated-at field said a later time than `updatedAt`.
        var clamped = false
        var value: JSONValue

        /// The time to record for the item in the metadata: `fallback` without an updated-at
        /// field, the clamped time with one too far ahead, `nil` when its field says it.
        func recordedTime(fallback: Timestamp) -> Timestamp? {
            guard let updatedAt else { return fallback }
            return clamped ? updatedAt : nil
        }
    }

    /// The items of `value`; client times more than the allowed skew ahead of `now` count as `now`.
    static func parse(_ value: JSONValue, items: EntityTypeConfig.ItemsConfig, now: Timestamp) -> Outcome<[Item]> {
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
            let clampedUpdatedAt = updatedAt.map { ConflictResolver.effectiveTimestamp($0, now: now) }
            if let time = deletedAt { deletedAt = ConflictResolver.effectiveTimestamp(time, now: now) }
            parsed.append(
                Item(id: id, updatedAt: clampedUpdatedAt, deletedAt: deletedAt, clamped: clampedUpdatedAt != updatedAt, value: element)
            )
        }
        return .success(parsed)
    }
}
