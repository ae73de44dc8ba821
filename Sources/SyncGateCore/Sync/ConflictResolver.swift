package import SyncGateWire
/// What a policy decided for one operation against one entity.
package enum PolicyDecision: Sendable, Hashable {
    /// Store `state` (the next version) and answer `status`.
    case write(EntityState, status: OperationResult.Status)
    /// Change nothing and answer `status`.
    case keep(status: OperationResult.Status)
    case reject(ErrorCode, String)
}

/// The conflict policies of PROTOCOL.md as pure functions of (operation, stored state, type, clock).
///
/// For an operation with base version b on an entity at version v:
/// - no entity: `create` applies as version 1; `update`/`delete` are `ENTITY_NOT_FOUND`;
/// - b > v: `VALIDATION_ERROR`;
/// - tombstone: deletes win (`server_wins`, `server_data: null`), except that `client_wins` revives;
/// - b == v: applies as v + 1;
/// - b < v: the type's policy decides.
package enum ConflictResolver {
    /// Client clocks more than this far ahead of the server count as the server clock.
    package static let maximumClockSkewMilliseconds: Int64 = 5 * 60 * 1000

    package static func effectiveTimestamp(_ timestamp: Timestamp, now: Timestamp) -> Timestamp {
        timestamp.millisecondsSinceEpoch - now.millisecondsSinceEpoch > maximumClockSkewMilliseconds ? now : timestamp
    }

    package static func resolve(
        _ operation: SyncOperation,
        key: EntityKey,
        current: EntityState?,
        type: EntityTypeConfig,
        now: Timestamp
    ) -> PolicyDecision {
        let timestamp = effectiveTimestamp(operation.clientTimestamp, now: now)

        guard let current else {
            guard operation.intent == .create else {
                return .reject(.entityNotFound, "\(operation.entityType) '\(operation.entityID)' does not exist")
            }
            guard operation.baseVersion == 0 else {
                return .reject(.validationError, "base_version \(operation.baseVersion) is ahead of the server (the entity does not exist)")
            }
            return create(operation, key: key, type: type, timestamp: timestamp, now: now)
        }

        guard operation.baseVersion <= current.version else {
            return .reject(
                .validationError,
                "base_version \(operation.baseVersion) is ahead of the server's version \(current.version)"
            )
        }

        if current.isDeleted {
            guard type.policy == .clientWins, operation.intent != .delete else {
                return .keep(status: .conflict(.serverWins))
            }
            return revive(operation, current: current, type: type, timestamp: timestamp, now: now)
        }

        if operation.baseVersion == current.version {
            return applyDirectly(operation, current: current, type: type, timestamp: timestamp, now: now, status: .applied)
        }

        return resolveStale(operation, current: current, type: type, timestamp: timestamp, now: now)
    }

    // MARK: - Cases

    static func create(_ operation: SyncOperation, key: EntityKey, type: EntityTypeConfig, timestamp: Timestamp, now: Timestamp) -> PolicyDecision {
        var document = operation.data ?? [:]
        var meta = EntityMeta()
        if let items = type.items, type.policy == .itemsMerge {
            switch ItemsMerge.replace(in: &document, items: items, meta: &meta, timestamp: timestamp, now: now) {
            case .success: break
            case .failure(let message): return .reject(.validationError, message)
            }
        }
        if type.policy == .fieldMerge {
            for field in document.keys { meta.fields[field] = FieldStamp(version: 1, timestamp: timestamp) }
        }
        let state = EntityState(key: key, version: 1, data: document, clientTimestamp: timestamp, updatedAt: now, meta: meta)
        return .write(state, status: .applied)
    }

    static func revive(_ operation: SyncOperation, current: EntityState, type: EntityTypeConfig, timestamp: Timestamp, now: Timestamp) -> PolicyDecision {
        let status: OperationResult.Status = operation.baseVersion == current.version ? .applied : .conflict(.clientWins)
        var revived = current
        revived.data = [:]
        return applyDirectly(operation, current: revived, type: type, timestamp: timestamp, now: now, status: status)
    }

    /// b == v (or a win that replays the operation as if it were): create replaces, update patches, delete deletes.
    static func applyDirectly(
        _ operation: SyncOperation,
        current: EntityState,
        type: EntityTypeConfig,
        timestamp: Timestamp,
        now: Timestamp,
        status: OperationResult.Status
    ) -> PolicyDecision {
        let version = current.version + 1
        var next = current
        next.version = version
        next.clientTimestamp = timestamp
        next.updatedAt = now

        switch operation.intent {
        case .delete:
            next.data = nil
            return .write(next, status: status)
        case .create, .update:
            let incoming = operation.data ?? [:]
            var document = operation.intent == .create ? incoming : (current.data ?? [:]).patched(with: incoming)
            if let items = type.items, type.policy == .itemsMerge, operation.intent == .create || incoming[items.path] != nil {
                switch ItemsMerge.replace(in: &document, items: items, meta: &next.meta, timestamp: timestamp, now: now) {
                case .success: break
                case .failure(let message): return .reject(.validationError, message)
                }
            }
            if type.policy == .fieldMerge {
                // A create replaces the whole document, so fields it drops changed too.
                var touched = Set(incoming.keys)
                if operation.intent == .create { touched.formUnion(current.data.map { Array($0.keys) } ?? []) }
                for field in touched { next.meta.fields[field] = FieldStamp(version: version, timestamp: timestamp) }
            }
            next.data = document
            return .write(next, status: status)
        }
    }

    static func resolveStale(_ operation: SyncOperation, current: EntityState, type: EntityTypeConfig, timestamp: Timestamp, now: Timestamp) -> PolicyDecision {
        switch type.policy {
        case .lww:
            guard clientIsLater(timestamp, than: current.clientTimestamp, ties: type.ties) else {
                return .keep(status: .conflict(.serverWins))
            }
            return applyDirectly(operation, current: current, type: type, timestamp: timestamp, now: now, status: .conflict(.clientWins))
        case .clientWins:
            return applyDirectly(operation, current: current, type: type, timestamp: timestamp, now: now, status: .conflict(.clientWins))
        case .serverWins:
            return .keep(status: .conflict(.serverWins))
        case .fieldMerge:
            guard operation.intent != .delete else {
                // Deletes win against concurrent field edits, as they do against a tombstone.
                return applyDirectly(operation, current: current, type: type, timestamp: timestamp, now: now, status: .conflict(.clientWins))
            }
            return mergeFields(operation, current: current, type: type, timestamp: timestamp, now: now)
        case .itemsMerge:
            guard operation.intent != .delete else {
                return applyDirectly(operation, current: current, type: type, timestamp: timestamp, now: now, status: .conflict(.clientWins))
            }
            return mergeItems(operation, current: current, type: type, timestamp: timestamp, now: now)
        }
    }

    /// `field_merge`: each patched field applies unless it changed after the base version; then the later timestamp wins.
    static func mergeFields(_ operation: SyncOperation, current: EntityState, type: EntityTypeConfig, timestamp: Timestamp, now: Timestamp) -> PolicyDecision {
        let version = current.version + 1
        var document = current.data ?? [:]
        var meta = current.meta
        var conflicted = false
        var changed = false
        for (field, value) in operation.data ?? [:] {
            // A field that is present without a stamp predates field tracking: assume it changed at
            // the current version. A field that was never set has not changed at all.
            let unstamped = current.data?[field] == nil ? nil : FieldStamp(version: current.version, timestamp: current.clientTimestamp)
            if let stamp = meta.fields[field] ?? unstamped, stamp.version > operation.baseVersion {
                conflicted = true
                guard clientIsLater(timestamp, than: stamp.timestamp, ties: type.ties) else { continue }
            }
            if value.isNull {
                document.removeValue(forKey: field)
            } else {
                document[field] = value
            }
            meta.fields[field] = FieldStamp(version: version, timestamp: timestamp)
            changed = true
        }
        let status: OperationResult.Status = conflicted ? .conflict(.merged) : .applied
        guard changed else { return .keep(status: status) }
        let next = EntityState(
            key: current.key,
            version: version,
            data: document,
            clientTimestamp: max(current.clientTimestamp, timestamp),
            updatedAt: now,
            meta: meta
        )
        return .write(next, status: status)
    }

    /// `items_merge`: top-level fields as `lww`, the items array merged item by item.
    static func mergeItems(_ operation: SyncOperation, current: EntityState, type: EntityTypeConfig, timestamp: Timestamp, now: Timestamp) -> PolicyDecision {
        let items = type.items ?? .init()
        let clientWinsTopLevel = clientIsLater(timestamp, than: current.clientTimestamp, ties: type.ties)
        var document = current.data ?? [:]
        var meta = current.meta
        let incoming = operation.data ?? [:]
        if clientWinsTopLevel {
            var topLevel = incoming
            topLevel.removeValue(forKey: items.path)
            document = document.patched(with: topLevel)
        }
        if let incomingItems = incoming[items.path], incomingItems.isNull {
            // `null` removes the array, as a current write does: a top-level change under lww.
            if clientWinsTopLevel { document.removeValue(forKey: items.path) }
        } else if let incomingItems = incoming[items.path] {
            switch ItemsMerge.merge(
                stored: document[items.path],
                incoming: incomingItems,
                items: items,
                meta: &meta,
                storedFallback: current.clientTimestamp,
                incomingFallback: timestamp,
                ties: type.ties,
                now: now
            ) {
            case .success(let merged): document[items.path] = merged
            case .failure(let message): return .reject(.validationError, message)
            }
        }
        guard document != current.data || meta != current.meta else {
            return .keep(status: .conflict(.merged))
        }
        let next = EntityState(
            key: current.key,
            version: current.version + 1,
            data: document,
            clientTimestamp: clientWinsTopLevel ? timestamp : current.clientTimestamp,
            updatedAt: now,
            meta: meta
        )
        return .write(next, status: .conflict(.merged))
    }

    // MARK: - Helpers

    static func clientIsLater(_ client: Timestamp, than server: Timestamp, ties: EntityTypeConfig.TieBreak) -> Bool {
        client > server || (client == server && ties == .client)
    }
}
