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

func result(_ key: String, _ entity: EntityKey, _ status: OperationResult.Status, version: Int64? = nil, serverData: JSONObject? = nil, merged: JSONObject? = nil) -> OperationResult {
    OperationResult(idempotencyKey: key, entityType: entity.entityType, entityID: entity.entityID, status: status, version: version, serverData: serverData, mergedData: merged)
}

extension PulledChange {
    /// A pulled change of `key` (its time does not matter to the client).
    init(key: EntityKey, data: JSONObject?, version: Int64) {
        self.init(entityType: key.entityType, entityID: key.entityID, householdID: key.householdID, data: data, version: version, updatedAt: Timestamp(millisecondsSinceEpoch: 0))
    }
}
