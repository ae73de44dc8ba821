package import SyncGateWire
/// How large a stored entity may grow, and how long its merge bookkeeping is kept.
///
/// Merges (field_merge, items_merge, client_wins patches) grow a stored document beyond any one
/// push, and its metadata (field stamps, item tombstones) with it. Without a bound, one entity can
/// grow until every worker that loads it and every front that serves it runs out of memory.
package struct DocumentLimits: Sendable, Hashable {
    /// The stored document and its merge metadata, serialized, in bytes (`SYNCGATE_MAX_DOCUMENT_BYTES`).
    package var maximumBytes: Int
    /// Item tombstones, and stamps of fields no longer in the document, older than this are
    /// dropped when the entity is next written (the tombstone retention: a device offline longer
    /// must resync anyway).
    package var metadataRetentionMilliseconds: Int64

    package init(maximumBytes: Int = 1 << 20, metadataRetentionMilliseconds: Int64 = 30 * 86_400_000) {
        self.maximumBytes = maximumBytes
        self.metadataRetentionMilliseconds = metadataRetentionMilliseconds
    }
}

extension EntityMeta {
    /// Drops item tombstones the server stored before `cutoff` (this write, at `now`, stores the
    /// new ones), and the stamps of fields `document` no longer has that last changed before it —
    /// only those `previous` (the stored metadata before this write) already had: their times
    /// come from clients, and one whose clock runs late must not see its deletion dropped by the
    /// very write that made it.
    ///
    /// A tombstone's retention runs from when the server stored it, not from its deleted-at time:
    /// a device offline for weeks deletes an item with a weeks-old time, and a stale copy pushed
    /// a day later must still find the tombstone. (Tombstones stored before that time was kept
    /// fall back to their deleted-at time.)
    package mutating func prune(before cutoff: Timestamp, now: Timestamp, document: JSONObject?, previous: EntityMeta?) {
        for item in itemTombstones.keys where tombstonesStored[item] == nil && previous?.itemTombstones[item] == nil {
            tombstonesStored[item] = now
        }
        itemTombstones = itemTombstones.filter { item, deleted in
            // A later deletion (its time raised by another device's) keeps it as long as before.
            max(tombstonesStored[item] ?? deleted, deleted) >= cutoff || previous?.itemTombstones[item] == nil
        }
        tombstonesStored = tombstonesStored.filter { itemTombstones[$0.key] != nil }
        fields = fields.filter { field, stamp in
            document?[field] != nil || stamp.timestamp >= cutoff || previous?.fields[field] == nil
        }
    }
}

extension EntityState {
    /// The bytes the entity takes stored: its document and its metadata, serialized.
    package var storedBytes: Int {
        (data.map { JSONValue.object($0).serializedBytes().count } ?? 0) + (meta.isEmpty ? 0 : meta.json.serializedBytes().count)
    }
}
