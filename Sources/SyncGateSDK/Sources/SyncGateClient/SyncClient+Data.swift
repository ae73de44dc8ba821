public import SyncGateWire
import Foundation

/// Which entities a read returns.
public enum ReadScope: Sendable, Hashable {
    /// The user's own and every household's.
    case all
    /// The user's own only.
    case personal
    /// One household's.
    case household(String)

    var selection: String?? {
        switch self {
        case .all: return nil
        case .personal: return .some(nil)
        case .household(let id): return .some(id)
        }
    }
}

extension SyncClient {
    /// Writes a whole document: creates the entity if this device does not have it, else
    /// updates the fields that differ (fields missing from `data` are removed).
    ///
    /// The write is in the local store (and every read) at once, and in the outbox until a
    /// sync pushes it. `household` is required for household-scoped types (for `households`
    /// and `household_members` it follows from the id).
    /// - Throws: ``SyncGateClientError/Code/readOnlyType`` for a derived type.
    @discardableResult
    public func write(type: String, id: String, data: JSONObject, household: String? = nil) async throws -> LocalWrite {
        try await record(.put(data), type: type, id: id, household: household)
    }

    /// Writes a whole document from an app model (see ``write(type:id:data:household:)``).
    @discardableResult
    public func write(type: String, id: String, value: some Encodable, household: String? = nil) async throws -> LocalWrite {
        guard let data = try JSONValue(encoding: value).objectValue else {
            throw SyncGateClientError(.invalidArgument, "a document must encode as a JSON object")
        }
        return try await write(type: type, id: id, data: data, household: household)
    }

    /// Changes some top-level fields (`null` removes one) and leaves the others.
    /// - Throws: ``SyncGateClientError/Code/notFound`` when the device does not have the entity.
    @discardableResult
    public func update(type: String, id: String, fields: JSONObject, household: String? = nil) async throws -> LocalWrite {
        try await record(.patch(fields), type: type, id: id, household: household)
    }

    /// Deletes an entity; does nothing if the device does not have it.
    @discardableResult
    public func delete(type: String, id: String, household: String? = nil) async throws -> LocalWrite {
        try await record(.delete, type: type, id: id, household: household)
    }

    /// The entities of a type (every type when `nil`), ordered by type, household and id.
    public func read(type: String? = nil, in scope: ReadScope = .all) async throws -> [SyncEntity] {
        try checkOpen()
        return try await local { try await store.entities(.init(entityType: type, household: scope.selection)) }
    }

    /// One entity of one household (`nil`: the user's own), or `nil` if the device does not have it.
    public func read(type: String, id: String, household: String?) async throws -> SyncEntity? {
        try checkOpen()
        return try await local { try await store.entity(EntityKey(entityType: type, entityID: id, householdID: household)) }
    }

    /// One entity wherever it is (the user's own or a household's), or `nil` if the device does
    /// not have it.
    /// - Throws: ``SyncGateClientError/Code/ambiguous`` when households hold entities of this type
    ///   and id each: read with the household then.
    public func read(type: String, id: String) async throws -> SyncEntity? {
        try checkOpen()
        let found = try await local { try await store.entities(type: type, id: id) }
        guard found.count <= 1 else {
            throw SyncGateClientError(.ambiguous, "\(type)/\(id) is in \(found.map { $0.householdID ?? "the user's own" }.joined(separator: ", ")): name the household")
        }
        return found.first
    }

    /// The entities of a type (every type when `nil`) now, and again after every change to
    /// them (local writes and pulled changes alike), until the loop stops iterating.
    public func observe(type: String? = nil, in scope: ReadScope = .all) -> AsyncThrowingStream<[SyncEntity], any Error> {
        store.observe(.init(entityType: type, household: scope.selection))
    }

    private func record(_ change: LocalChange, type: String, id: String, household: String?) async throws -> LocalWrite {
        try checkOpen()
        guard !configuration.readOnlyTypes.contains(type) else {
            throw SyncGateClientError(.readOnlyType, "'\(type)' is derived by the server and cannot be written")
        }
        guard !type.isEmpty, !id.isEmpty else {
            throw SyncGateClientError(.invalidArgument, "an entity needs a type and an id")
        }
        switch change {
        case .put(let fields), .patch(let fields):
            // JSON has no NaN or infinity: written as `null`, such a field would be removed.
            guard fields.values.allSatisfy(\.isFinite) else {
                throw SyncGateClientError(.invalidArgument, "a document's numbers must be finite (no NaN or infinity)")
            }
        case .delete:
            break
        }
        let key = EntityKey(entityType: type, entityID: id, householdID: household)
        let now = Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
        let effect = try await local {
            try await store.record(change, on: key, at: now, newKey: { UUID().uuidString.lowercased() })
        }
        if effect.idempotencyKey != nil { wakeup.signal() }
        await engine.refreshPendingWrites()
        return LocalWrite(key: key, idempotencyKey: effect.idempotencyKey)
    }
}

extension JSONValue {
    /// Whether every number in the value is finite.
    fileprivate var isFinite: Bool {
        switch self {
        case .double(let number): return number.isFinite
        case .array(let items): return items.allSatisfy(\.isFinite)
        case .object(let fields): return fields.values.allSatisfy(\.isFinite)
        case .null, .bool, .int, .string: return true
        }
    }
}
