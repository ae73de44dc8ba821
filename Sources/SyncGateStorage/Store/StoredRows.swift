package import SyncGateCore
package import SyncGateWire

/// A stored row that does not decode: storage corruption, not bad input. It is never guessed
/// around (an unreadable document is not a tombstone); the job that meets it fails for good.
package struct StoredDataError: Error, PermanentFailure, CustomStringConvertible {
    package var message: String
    package init(_ message: String) { self.message = message }
    package var description: String { message }
}

extension EntityState {
    /// An entity from its stored row.
    package init(stored row: StoredEntityRow) throws(StoredDataError) {
        guard let scope = Scope(key: row.scope) else {
            throw StoredDataError("stored entity \(row.scope)/\(row.entityType)/\(row.entityID) has an invalid scope")
        }
        let key = EntityKey(scope: scope, entityType: row.entityType, entityID: row.entityID)
        var meta = EntityMeta()
        if let text = row.meta {
            guard let json = try? JSONParser.stored.parse(text), json.objectValue != nil else {
                throw StoredDataError("stored entity \(key): its metadata does not parse as a JSON object")
            }
            meta = EntityMeta(json: json)
        }
        self.init(
            key: key,
            version: row.version,
            data: try Self.document(row.data, of: "\(key)"),
            clientTimestamp: Timestamp(millisecondsSinceEpoch: row.clientTimestamp),
            updatedAt: Timestamp(millisecondsSinceEpoch: row.updatedAt),
            meta: meta
        )
    }

    /// A stored document: `nil` (a tombstone) only when the column is NULL.
    package static func document(_ text: String?, of what: String) throws(StoredDataError) -> JSONObject? {
        guard let text else { return nil }
        guard let object = (try? JSONParser.stored.parse(text))?.objectValue else {
            throw StoredDataError("stored entity \(what): its document does not parse as a JSON object")
        }
        return object
    }
}

extension FeedChange {
    /// A stored document checked (not parsed): a page writes it as it is.
    static func document(_ text: String?, of what: String) throws(StoredDataError) -> DocumentText? {
        guard let text else { return nil }
        do {
            return try DocumentText(checking: text, parser: .stored)
        } catch {
            throw StoredDataError("stored entity \(what): its document does not parse as a JSON object")
        }
    }

    /// A change from its stored row.
    package init(scope: Scope, row: ChangeRow) throws(StoredDataError) {
        self.init(
            scope: scope,
            sequence: row.sequence,
            entityType: row.entityType,
            entityID: row.entityID,
            version: row.version,
            document: try Self.document(row.data, of: "\(scope.key)/\(row.entityType)/\(row.entityID) (change \(row.sequence))"),
            updatedAt: Timestamp(millisecondsSinceEpoch: row.updatedAt),
            origin: row.origin
        )
    }
}

extension EntityRowWrite {
    /// The rows for `states`, numbered after the feed heads (advanced in place), each with the group
    /// key its type's derivation files it under, the `origin` of the change and its `writer`.
    static func rows(
        _ states: [EntityState], heads: inout [Scope: Int64], derivations: [any Derivation], origin: String? = nil, writer: String? = nil
    ) throws -> [EntityRowWrite] {
        let sequences = try FeedAppend.sequences(for: states, heads: &heads)
        return zip(states, sequences).map { state, sequence in
            EntityRowWrite(
                row: StoredEntityRow(
                    scope: state.key.scope.key,
                    entityType: state.key.entityType,
                    entityID: state.key.entityID,
                    version: state.version,
                    data: state.data.map { JSONValue.object($0).serialized() },
                    meta: state.meta.isEmpty ? nil : state.meta.json.serialized(),
                    clientTimestamp: state.clientTimestamp.millisecondsSinceEpoch,
                    updatedAt: state.updatedAt.millisecondsSinceEpoch
                ),
                groupKey: derivations.lazy.compactMap { $0.storedGroupKey(of: state) }.first,
                sequence: sequence,
                origin: origin,
                writer: writer
            )
        }
    }
}

extension JSONParser {
    /// Documents read back from the database were validated on the way in; allow deep nesting.
    static let stored = JSONParser(maximumDepth: 512)
}

extension StorageTransaction {
    /// The entities `queries` select, decoded, by key.
    func entities(_ queries: [EntityQuery]) async throws -> [EntityKey: EntityState] {
        guard !queries.isEmpty else { return [:] }
        var states: [EntityKey: EntityState] = [:]
        for row in try await loadEntities(queries) {
            let state = try EntityState(stored: row)
            states[state.key] = state
        }
        return states
    }
}
