@testable import SyncGateClient

extension EntityKey {
    static let milk = EntityKey(entityType: "inventory", entityID: "milk", householdID: "home")
    static let eggs = EntityKey(entityType: "inventory", entityID: "eggs", householdID: "home")
    static let weight = EntityKey(entityType: "weightLogs", entityID: "w1")
}

/// Idempotency keys `k1`, `k2`, … in order, so tests can name them.
final class KeyMaker: @unchecked Sendable {
    private var count = 0
    func next() -> String {
        count += 1
        return "k\(count)"
    }
}

/// Records a change on a slice with the next sequence number and key.
@discardableResult
func record(
    _ change: LocalChange, on key: EntityKey, in slice: inout ReplicaSlice, keys: KeyMaker, at timestamp: Int64 = 1_000
) throws -> WriteEffect {
    let sequence = (slice.outbox.map(\.sequence).max() ?? 0) + 1
    return try slice.record(change, on: key, at: timestamp, sequence: sequence, newKey: keys.next)
}

/// Marks entries sent, as a push does.
func markSent(_ keys: [String], in slice: inout ReplicaSlice) {
    for index in slice.outbox.indices where keys.contains(slice.outbox[index].idempotencyKey) {
        slice.outbox[index].state = .sent(jobID: nil)
    }
}

func result(_ key: String, _ entity: EntityKey, _ status: WireResult.Status, version: Int64? = nil, serverData: JSONValue? = nil, merged: JSONObject? = nil) -> WireResult {
    WireResult(idempotencyKey: key, entityType: entity.entityType, entityID: entity.entityID, status: status, version: version, serverData: serverData, mergedData: merged)
}
