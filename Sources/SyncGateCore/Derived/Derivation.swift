package import SyncGateWire
/// Entities the server derives from the documents of one source type, written in the same
/// transaction as the changes that affect them (daily summaries from food logs).
///
/// A derivation groups the live documents of its source type by ``groupKey(of:)``; each group
/// has at most one derived entity, in the same scope, whose id is the group key. Every stored
/// source entity carries its group key in an indexed column, so a group's members load with one
/// indexed query: neither the drivers nor the schema know any particular derivation.
package protocol Derivation: Sendable {
    /// The type whose documents feed the derivation.
    var sourceType: String { get }
    /// The (read-only) type of the derived entities.
    var derivedType: String { get }
    /// The group a source document counts towards; `nil` when it counts towards none.
    func groupKey(of document: JSONObject) -> String?
    /// The derived document of a group from its live members; `nil` when the group has none.
    func derive(group: String, members: [JSONObject]) -> JSONObject?
}

/// One group of one derivation.
package struct DerivedGroup: Sendable, Hashable, Comparable {
    package var scope: Scope
    package var key: String

    package static func < (lhs: DerivedGroup, rhs: DerivedGroup) -> Bool {
        (lhs.scope.key, lhs.key) < (rhs.scope.key, rhs.key)
    }
}

extension Derivation {
    /// The group key stored with an entity: only live documents of the source type have one.
    package func storedGroupKey(of state: EntityState) -> String? {
        guard state.key.entityType == sourceType, let data = state.data else { return nil }
        return groupKey(of: data)
    }

    /// The groups a batch's writes touch: each written source entity's old and new group.
    package func groupsTouched(by writes: [EntityState], original: [EntityKey: EntityState]) -> Set<DerivedGroup> {
        var groups: Set<DerivedGroup> = []
        for state in writes where state.key.entityType == sourceType {
            for stored in [original[state.key], state].compactMap({ $0 }) {
                if let key = storedGroupKey(of: stored) { groups.insert(DerivedGroup(scope: state.key.scope, key: key)) }
            }
        }
        return groups
    }

    /// What ``plan(groups:stored:writes:now:)`` needs loaded for `groups`: their live members and
    /// their derived entities (live or tombstoned).
    package func inputs(for groups: Set<DerivedGroup>) -> [EntityQuery] {
        let byScope = Dictionary(grouping: groups, by: \.scope)
        return byScope.keys.sorted().flatMap { scope -> [EntityQuery] in
            let keys = byScope[scope, default: []].map(\.key).sorted()
            return [
                .groupMembers(scope: scope, type: sourceType, groups: keys),
                .keys(keys.map { EntityKey(scope: scope, entityType: derivedType, entityID: $0) }),
            ]
        }
    }

    /// The derived writes for `groups`, for the groups whose derived document changes.
    ///
    /// - Parameters:
    ///   - stored: the groups' members and derived entities as stored before the batch.
    ///   - writes: the batch's writes, which replace stored members (a member may leave its group).
    package func plan(groups: Set<DerivedGroup>, stored: [EntityState], writes: [EntityState] = [], now: Timestamp) -> [EntityState] {
        var members: [EntityKey: EntityState] = [:]
        var existing: [DerivedGroup: EntityState] = [:]
        for state in stored {
            if state.key.entityType == derivedType {
                existing[DerivedGroup(scope: state.key.scope, key: state.key.entityID)] = state
            } else if state.key.entityType == sourceType {
                members[state.key] = state
            }
        }
        for state in writes where state.key.entityType == sourceType { members[state.key] = state }

        var documents: [DerivedGroup: [JSONObject]] = [:]
        // Key order, so a group's members are summed in the same order on every run.
        for key in members.keys.sorted() {
            guard let member = members[key], let group = storedGroupKey(of: member).map({ DerivedGroup(scope: key.scope, key: $0) }),
                groups.contains(group), let data = member.data
            else { continue }
            documents[group, default: []].append(data)
        }
        var derived: [EntityState] = []
        for group in groups.sorted() {
            let document = derive(group: group.key, members: documents[group] ?? [])
            let current = existing[group]
            // Unchanged (or still nothing to derive): no write.
            guard document != current?.data else { continue }
            derived.append(
                EntityState(
                    key: EntityKey(scope: group.scope, entityType: derivedType, entityID: group.key),
                    version: (current?.version ?? 0) + 1,
                    data: document,
                    clientTimestamp: now,
                    updatedAt: now
                )
            )
        }
        return derived
    }

    /// What a rebuild of `scope` between two group keys (inclusive) loads.
    package func rebuildInputs(scope: Scope, from lower: String?, through upper: String?) -> [EntityQuery] {
        [
            .groupRange(scope: scope, type: sourceType, from: lower, through: upper),
            .idRange(scope: scope, type: derivedType, from: lower, through: upper),
        ]
    }

    /// A rebuild from stored rows: every group with a live member or a live derived entity (which
    /// goes once its members are gone) is derived again.
    ///
    /// - Returns: how many groups were checked, and the writes for those whose document changed.
    package func rebuild(stored: [EntityState], now: Timestamp) -> (groupsChecked: Int, writes: [EntityState]) {
        var groups: Set<DerivedGroup> = []
        for state in stored {
            if state.key.entityType == derivedType, !state.isDeleted {
                groups.insert(DerivedGroup(scope: state.key.scope, key: state.key.entityID))
            } else if let key = storedGroupKey(of: state) {
                groups.insert(DerivedGroup(scope: state.key.scope, key: key))
            }
        }
        return (groups.count, plan(groups: groups, stored: stored, now: now))
    }
}

/// A set of entities a driver loads in one query: the vocabulary of loads, so the orchestration
/// can say what it needs without any SQL.
package enum EntityQuery: Sendable, Hashable {
    /// These entities (live or tombstoned).
    case keys([EntityKey])
    /// The live entities of `type` in `scope` whose group key is one of `groups`.
    case groupMembers(scope: Scope, type: String, groups: [String])
    /// The live entities of `type` in `scope` whose group key lies between `from` and `through` (`nil`: unbounded).
    case groupRange(scope: Scope, type: String, from: String?, through: String?)
    /// The entities (live or tombstoned) of `type` in `scope` whose id lies between `from` and `through` (`nil`: unbounded).
    case idRange(scope: Scope, type: String, from: String?, through: String?)
}

extension Collections {
    /// The derivations this deployment runs: the daily summaries, fed by `foodLogs`.
    package var derivations: [any Derivation] {
        [DailySummaries(items: self[DailySummaries.sourceTypeName]?.items ?? .init())]
    }

    /// The derivation fed by `type`, if any.
    package func derivation(fedBy type: String) -> (any Derivation)? {
        derivations.first { $0.sourceType == type }
    }
}
