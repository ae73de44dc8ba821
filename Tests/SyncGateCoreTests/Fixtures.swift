@testable import SyncGateCore
import SyncGateWire

/// Shared builders for the pure tests.
enum Fixture {
    static let now = Timestamp(rfc3339: "2026-01-15T12:00:00.000Z")!
    static let key = EntityKey(scope: .user("u1"), entityType: "notes", entityID: "n1")

    static func at(_ secondsFromNow: Int64) -> Timestamp {
        now.adding(milliseconds: secondsFromNow * 1000)
    }

    static func type(_ policy: EntityTypeConfig.Policy, ties: EntityTypeConfig.TieBreak = .server, fields: [EntityTypeConfig.FieldRule] = []) -> EntityTypeConfig {
        EntityTypeConfig(name: "notes", policy: policy, ties: ties, fields: fields)
    }

    static func entity(version: Int64 = 3, data: JSONObject? = ["title": "server", "body": "b"], at seconds: Int64 = -60, meta: EntityMeta = .init()) -> EntityState {
        EntityState(key: key, version: version, data: data, clientTimestamp: at(seconds), updatedAt: at(seconds), meta: meta)
    }

    static func operation(
        _ intent: SyncOperation.Intent,
        base: Int64 = 3,
        data: JSONObject? = ["title": "client"],
        at seconds: Int64 = 0,
        key idempotencyKey: String = "k1",
        type: String = "notes",
        id: String = "n1",
        household: String? = nil
    ) -> SyncOperation {
        SyncOperation(
            idempotencyKey: idempotencyKey,
            entityType: type,
            entityID: id,
            intent: intent,
            baseVersion: base,
            data: intent == .delete ? nil : data,
            clientTimestamp: at(seconds),
            householdID: household
        )
    }

    static func resolve(_ operation: SyncOperation, _ current: EntityState?, _ type: EntityTypeConfig) -> PolicyDecision {
        ConflictResolver.resolve(operation, key: key, current: current, type: type, now: now)
    }
}

extension PolicyDecision {
    var written: EntityState? {
        if case .write(let state, _) = self { return state }
        return nil
    }

    var status: OperationResult.Status? {
        switch self {
        case .write(_, let status), .keep(let status): return status
        case .reject: return nil
        }
    }

    var rejection: ErrorCode? {
        if case .reject(let code, _) = self { return code }
        return nil
    }

    var isKeep: Bool {
        if case .keep = self { return true }
        return false
    }
}
