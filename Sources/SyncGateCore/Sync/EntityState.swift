package import SyncGateWire
/// The stored state of one entity: its document (or tombstone), version and merge metadata.
package struct EntityState: Sendable, Hashable {
    package var key: EntityKey
    package var version: Int64
    /// The document; `nil` marks a tombstone (a soft delete).
    package var data: JSONObject?
    /// The (clamped) client timestamp of the write that made this version; `lww` compares against it.
    package var clientTimestamp: Timestamp
    /// Server time of the last change.
    package var updatedAt: Timestamp
    package var meta: EntityMeta

    package init(
        key: EntityKey,
        version: Int64,
        data: JSONObject?,
        clientTimestamp: Timestamp,
        updatedAt: Timestamp,
        meta: EntityMeta = .init()
    ) {
        self.key = key
        self.version = version
        self.data = data
        self.clientTimestamp = clientTimestamp
        self.updatedAt = updatedAt
        self.meta = meta
    }

    package var isDeleted: Bool { data == nil }
}

/// Per-field and per-item bookkeeping that some policies need.
package struct EntityMeta: Sendable, Hashable {
    /// `field_merge`: the version and timestamp at which each top-level field last changed.
    package var fields: [String: FieldStamp]
    /// `items_merge`: ids of deleted items and when they were deleted, so stale copies stay deleted.
    package var itemTombstones: [String: Timestamp]
    /// `items_merge`: when each stored item without an updated-at field was written (the time of
    /// the operation that wrote it), so later merges compare against that, not the entity's time.
    package var itemTimes: [String: Timestamp]
    /// `items_merge`: when the server first stored each item tombstone (its deleted-at time is
    /// the client's, maybe weeks old): the retention runs from here.
    package var tombstonesStored: [String: Timestamp]

    package init(
        fields: [String: FieldStamp] = [:], itemTombstones: [String: Timestamp] = [:], itemTimes: [String: Timestamp] = [:],
        tombstonesStored: [String: Timestamp] = [:]
    ) {
        self.fields = fields
        self.itemTombstones = itemTombstones
        self.itemTimes = itemTimes
        self.tombstonesStored = tombstonesStored
    }

    package var isEmpty: Bool { fields.isEmpty && itemTombstones.isEmpty && itemTimes.isEmpty && tombstonesStored.isEmpty }

    package var json: JSONValue {
        var object: JSONObject = [:]
        if !fields.isEmpty {
            object["f"] = .object(fields.mapValues { ["v": .int($0.version), "t": .int($0.timestamp.millisecondsSinceEpoch)] })
        }
        if !itemTombstones.isEmpty {
            object["d"] = .object(itemTombstones.mapValues { .int($0.millisecondsSinceEpoch) })
        }
        if !itemTimes.isEmpty {
            object["t"] = .object(itemTimes.mapValues { .int($0.millisecondsSinceEpoch) })
        }
        if !tombstonesStored.isEmpty {
            object["s"] = .object(tombstonesStored.mapValues { .int($0.millisecondsSinceEpoch) })
        }
        return .object(object)
    }

    package init(json: JSONValue?) {
        self.init()
        guard let object = json?.objectValue else { return }
        for (field, stamp) in object["f"]?.objectValue ?? [:] {
            if let version = stamp["v"]?.integerValue, let millis = stamp["t"]?.integerValue {
                fields[field] = FieldStamp(version: version, timestamp: Timestamp(millisecondsSinceEpoch: millis))
            }
        }
        for (item, millis) in object["d"]?.objectValue ?? [:] {
            if let millis = millis.integerValue { itemTombstones[item] = Timestamp(millisecondsSinceEpoch: millis) }
        }
        for (item, millis) in object["t"]?.objectValue ?? [:] {
            if let millis = millis.integerValue { itemTimes[item] = Timestamp(millisecondsSinceEpoch: millis) }
        }
        for (item, millis) in object["s"]?.objectValue ?? [:] {
            if let millis = millis.integerValue { tombstonesStored[item] = Timestamp(millisecondsSinceEpoch: millis) }
        }
    }
}

package struct FieldStamp: Sendable, Hashable {
    package var version: Int64
    package var timestamp: Timestamp
}
