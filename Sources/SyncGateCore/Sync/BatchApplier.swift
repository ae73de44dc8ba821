package import SyncGateWire
/// Decides a whole job in memory, operation by operation, in push order.
///
/// The storage orchestration applies a job in one transaction with a constant number of round trips:
/// 1. ``requirements(for:)`` names what to lock and load (feeds, entities, idempotency keys,
///    households, and the parents the pushed documents name);
/// 2. ``parentKeys(for:loaded:)`` names the parents only the stored documents name;
/// 3. ``apply(_:snapshot:)`` decides every operation (conflict policy, field rules, permissions);
/// 4. the collections' derivations add the derived writes (see ``Derivation``); the inputs of
///    the groups ``groupsNamed(by:for:)`` names load with step 1's read, the others' here;
/// 5. the writes go back with set-based statements.
package struct BatchApplier: Sendable {
    package var userID: String
    package var collections: Collections
    package var now: Timestamp
    /// Operations (by idempotency key) the database refused to store when the job was tried:
    /// each is rejected with `VALIDATION_ERROR` and this message, and the rest apply.
    package var refused: [ExactKey: String] = [:]

    package init(userID: String, collections: Collections, now: Timestamp) {
        self.userID = userID
        self.collections = collections
        self.now = now
    }

    package var userScope: Scope { .user(userID) }

    // MARK: - Stage 1 and 2: what to load

    package struct Requirements: Sendable, Equatable {
        /// Feeds to lock, in this (sorted) order, before reading anything else.
        package var scopes: [Scope]
        package var entityKeys: Set<EntityKey>
        /// The households of `scopes`, told apart by their bytes as the databases tell them.
        package var householdIDs: [String]
        package var idempotencyKeys: [String]
    }

    package func requirements(for operations: [SyncOperation]) -> Requirements {
        var scopes: Set<Scope> = [userScope]
        var keys: Set<EntityKey> = []
        for operation in operations {
            guard case .entity(let key, let type) = target(of: operation) else { continue }
            keys.insert(key)
            if let household = key.scope.householdID {
                scopes.insert(key.scope)
                if type.builtIn == .households {
                    keys.insert(HouseholdIDs.membershipKey(household: household, user: userID))
                }
            }
        }
        keys.formUnion(parentKeys(for: operations, loaded: [:]))
        return Requirements(
            scopes: scopes.sorted(),
            entityKeys: keys,
            householdIDs: scopes.sorted().compactMap(\.householdID),
            idempotencyKeys: Set(operations.map { ExactKey($0.idempotencyKey) }).sorted().map(\.id)
        )
    }

    /// The groups of `derivation` that the pushed documents name (creates and updates of its
    /// source type, in their scopes), known before anything is read. A write's other group, its
    /// stored document's when it leaves a group, is known only once the stored document is: an
    /// apply reads these groups' inputs with everything else and the rest after deciding.
    package func groupsNamed(by operations: [SyncOperation], for derivation: any Derivation) -> Set<DerivedGroup> {
        var groups: Set<DerivedGroup> = []
        for operation in operations where operation.entityType == derivation.sourceType {
            guard case .entity(let key, _) = target(of: operation), let data = operation.data, let group = derivation.groupKey(of: data) else { continue }
            groups.insert(DerivedGroup(scope: key.scope, key: group))
        }
        return groups
    }

    /// Parents referenced by operations of types with a parent-archived rule, as far as they can be
    /// known before applying (from the pushed data or the stored entity).
    package func parentKeys(for operations: [SyncOperation], loaded: [EntityKey: EntityState]) -> Set<EntityKey> {
        var keys: Set<EntityKey> = []
        for operation in operations {
            guard case .entity(let key, let type) = target(of: operation), let parent = type.parent else { continue }
            let references = [operation.data?[parent.referenceField], loaded[key]?.data?[parent.referenceField]]
            for case .string(let parentID)? in references {
                keys.insert(EntityKey(scope: key.scope, entityType: parent.parentType, entityID: parentID))
            }
        }
        return keys
    }

    // MARK: - Stage 3: decide

    package struct Snapshot: Sendable {
        /// Stored states of the loaded keys; a missing key does not exist.
        package var entities: [EntityKey: EntityState]
        /// Idempotency keys seen before, with the version they answered.
        package var recorded: [ExactKey: Int64?]
        /// By `.household(id)`: ids compare by bytes, as the databases compare them (Swift's
        /// `String` would take NFC and NFD spellings of one name for one household).
        package var households: [Scope: HouseholdState]

        package init(entities: [EntityKey: EntityState] = [:], recorded: [ExactKey: Int64?] = [:], households: [Scope: HouseholdState] = [:]) {
            self.entities = entities
            self.recorded = recorded
            self.households = households
        }
    }

    package func apply(_ operations: [SyncOperation], snapshot: Snapshot) -> BatchOutcome {
        var run = Run(applier: self, snapshot: snapshot)
        for operation in operations {
            run.results.append(run.apply(operation))
        }
        return run.outcome()
    }

    // MARK: - Targets

    enum Target {
        case entity(EntityKey, EntityTypeConfig)
        case invalid(ErrorCode, String)
    }

    func target(of operation: SyncOperation) -> Target {
        guard let type = collections[operation.entityType] else {
            return .invalid(.validationError, "unknown entity type '\(operation.entityType)'")
        }
        guard !type.readOnly else {
            return .invalid(.permissionDenied, "entity type '\(type.name)' is read-only")
        }
        switch type.scope {
        case .user:
            guard operation.householdID == nil else {
                return .invalid(.validationError, "household_id must be null for the user-scoped type '\(type.name)'")
            }
            return .entity(EntityKey(scope: userScope, entityType: type.name, entityID: operation.entityID), type)
        case .household:
            let household: String
            switch type.builtIn {
            case .households:
                household = operation.entityID
                if let given = operation.householdID, !given.sameBytes(as: household) {
                    return .invalid(.validationError, "household_id must equal entity_id for households")
                }
                guard !household.utf8.contains(UInt8(ascii: ":")), IdentifierLimits.hasLength(household, in: 1...IdentifierLimits.householdID) else {
                    return .invalid(.validationError, "a household id is 1 to \(IdentifierLimits.householdID) characters without ':'")
                }
            case .householdMembers:
                guard let parts = HouseholdIDs.splitMembershipID(operation.entityID, household: operation.householdID) else {
                    return .invalid(.validationError, "a household_members entity_id is '<household_id>:<user_id>'")
                }
                household = parts.household
            default:
                guard let given = operation.householdID else {
                    return .invalid(.validationError, "household_id is required for the household-scoped type '\(type.name)'")
                }
                household = given
            }
            return .entity(EntityKey(scope: .household(household), entityType: type.name, entityID: operation.entityID), type)
        }
    }
}

/// Everything a job's transaction writes, decided in memory.
package struct BatchOutcome: Sendable {
    package var results: [OperationResult]
    /// Final state of every entity the job changed, in the order they enter their feeds.
    package var writes: [EntityState]
    /// Idempotency keys to remember, with the version they answered.
    package var recorded: [(key: String, version: Int64?)]
    /// Households whose owner, archive flag or members changed (final states).
    package var households: [HouseholdState]
    /// Users whose set of readable households changed: their live waiters must be woken.
    package var wakeUsers: Set<ExactKey>

    /// The feeds the job advances.
    package var scopes: Set<Scope> { Set(writes.map(\.key.scope)) }
}

extension BatchApplier {
    /// The mutable state of one batch being decided.
    struct Run {
        let applier: BatchApplier
        var entities: [EntityKey: EntityState]
        var recorded: [ExactKey: Int64?]
        var households: [Scope: HouseholdState]
        var results: [OperationResult] = []
        var newRecords: [(key: String, version: Int64?)] = []
        /// Every write, in order; an entity's last one is its final state, and the feed order.
        var written: [EntityState] = []
        /// Where each entity's last write is in `written`.
        var lastWrite: [EntityKey: Int] = [:]
        var touchedHouseholds: Set<Scope> = []
        var wakeUsers: Set<ExactKey> = []

        init(applier: BatchApplier, snapshot: Snapshot) {
            self.applier = applier
            self.entities = snapshot.entities
            self.recorded = snapshot.recorded
            self.households = snapshot.households
        }

        var user: String { applier.userID }

        mutating func apply(_ operation: SyncOperation) -> OperationResult {
            // By bytes, as the records are stored: another spelling of a key is another key.
            if let version = recorded[ExactKey(operation.idempotencyKey)] {
                return OperationResult(
                    idempotencyKey: operation.idempotencyKey,
                    entityType: operation.entityType,
                    entityID: operation.entityID,
                    status: .duplicate,
                    version: version
                )
            }
            let result = decide(operation)
            if result.isRecorded {
                recorded[ExactKey(operation.idempotencyKey)] = result.version
                newRecords.append((operation.idempotencyKey, result.version))
            }
            return result
        }

        mutating func decide(_ operation: SyncOperation) -> OperationResult {
            if let message = applier.refused[ExactKey(operation.idempotencyKey)] {
                return .rejected(operation, .validationError, message)
            }
            let key: EntityKey
            var type: EntityTypeConfig
            switch applier.target(of: operation) {
            case .invalid(let code, let message):
                return .rejected(operation, code, message)
            case .entity(let targetKey, let targetType):
                key = targetKey
                type = targetType
            }
            if let data = operation.data, let reason = StorableDocument.violation(in: data) {
                return .rejected(operation, .validationError, reason)
            }
            if let household = key.scope.householdID {
                switch checkHousehold(operation, household: household, type: type) {
                case .failure(let rejection): return rejection
                case .success(let effective): type = effective
                }
            }

            let current = entities[key]
            // An archive is final, also once its tombstone was purged (the household's row keeps it).
            if type.builtIn == .households, operation.intent != .delete, key.scope.householdID != nil, households[key.scope]?.archived == true {
                return OperationResult(
                    idempotencyKey: operation.idempotencyKey, entityType: operation.entityType, entityID: operation.entityID,
                    // A conflict always names a version: 0 once the tombstone is purged (nothing stored).
                    status: .conflict(.serverWins), version: current?.version ?? 0, serverData: nil
                )
            }
            // Only a corrupted or planted row gets here; the next version would not fit.
            if current?.version == .max {
                return .rejected(operation, .validationError, "\(operation.entityType) '\(operation.entityID)' has used every version number")
            }
            switch ConflictResolver.resolve(operation, key: key, current: current, type: type, now: applier.now) {
            case .reject(let code, let message):
                return .rejected(operation, code, message)
            case .keep(let status):
                return OperationResult(
                    idempotencyKey: operation.idempotencyKey,
                    entityType: operation.entityType,
                    entityID: operation.entityID,
                    status: status,
                    version: current?.version,
                    serverData: status == .conflict(.serverWins) ? current?.data : nil,
                    mergedData: status == .conflict(.merged) ? current?.data : nil
                )
            case .write(var state, let status):
                if let document = state.data, let violation = FieldRules.violation(in: document, of: type) {
                    return .rejected(operation, .validationError, violation)
                }
                let limits = applier.collections.documentLimits
                state.meta.prune(
                    before: applier.now.adding(milliseconds: -limits.metadataRetentionMilliseconds), now: applier.now, document: state.data, previous: current?.meta
                )
                let size = state.storedBytes
                if size > limits.maximumBytes {
                    return .rejected(
                        operation, .validationError,
                        "the stored \(operation.entityType) would be \(size) bytes, over the limit of \(limits.maximumBytes) (SYNCGATE_MAX_DOCUMENT_BYTES)"
                    )
                }
                // The stored parent too: an entry cannot leave an archived project any more than change in it.
                // (Two calls, not a loop over an array literal: Swift 6.3.1's optimizer fails its
                // ownership verification on that loop here, and no release build compiles.)
                if let rejection = checkParent(operation, type: type, key: key, document: state.data)
                    ?? checkParent(operation, type: type, key: key, document: current?.data)
                {
                    return rejection
                }
                let sideEffects = applyHouseholdEffects(operation, type: type, key: key, state: &state)
                record(state)
                sideEffects.forEach { record($0) }
                return OperationResult(
                    idempotencyKey: operation.idempotencyKey,
                    entityType: operation.entityType,
                    entityID: operation.entityID,
                    status: status,
                    version: state.version,
                    mergedData: status == .conflict(.merged) ? state.data : nil
                )
            }
        }

        mutating func record(_ state: EntityState) {
            entities[state.key] = state
            lastWrite[state.key] = written.count
            written.append(state)
        }

        func checkParent(_ operation: SyncOperation, type: EntityTypeConfig, key: EntityKey, document: JSONObject?) -> OperationResult? {
            guard let parent = type.parent, let parentID = document?[parent.referenceField]?.stringValue else { return nil }
            let parentKey = EntityKey(scope: key.scope, entityType: parent.parentType, entityID: parentID)
            guard let parentState = entities[parentKey], parentState.data?[parent.archivedField] == .bool(true) else { return nil }
            return .rejected(
                operation,
                code: parent.errorCode,
                message: "\(parent.parentType) '\(parentID)' is archived",
                retryable: false
            )
        }

        enum HouseholdCheck {
            case success(EntityTypeConfig)
            case failure(OperationResult)
        }

        /// Permissions for household-scoped writes; returns the policy to resolve with.
        func checkHousehold(_ operation: SyncOperation, household: String, type: EntityTypeConfig) -> HouseholdCheck {
            let state = households[.household(household)]
            func deny(_ message: String) -> HouseholdCheck { .failure(.rejected(operation, .permissionDenied, message)) }
            func invalid(_ message: String) -> HouseholdCheck { .failure(.rejected(operation, .validationError, message)) }
            var clientWins = type
            clientWins.policy = .clientWins

            switch type.builtIn {
            case .households:
                guard let state else { return .success(type) }  // create makes it; update/delete: ENTITY_NOT_FOUND
                guard state.role(of: user) != nil else { return deny("you are not a member of household '\(household)'") }
                guard state.isOwned(by: user) else { return deny("only the owner of household '\(household)' may change it") }
                // The owner's archive is final whatever the versions say.
                return .success(operation.intent == .delete ? clientWins : type)

            case .householdMembers:
                guard let state, !state.archived else {
                    return .failure(.rejected(operation, .entityNotFound, "household '\(household)' does not exist"))
                }
                guard let member = HouseholdIDs.splitMembershipID(operation.entityID, household: household)?.user else {
                    return invalid("a household_members entity_id is '<household_id>:<user_id>'")
                }
                // A member leaves; a former one's leave again (another device's, queued) is answered
                // as any delete of a deleted entity is. Neither gives a right.
                let leaving = operation.intent == .delete && member.sameBytes(as: user) && state.role(of: user) != .owner
                if !leaving {
                    guard state.role(of: user) != nil else { return deny("you are not a member of household '\(household)'") }
                    guard state.isOwned(by: user) else {
                        return deny("only the owner of household '\(household)' adds or removes members")
                    }
                }
                switch operation.intent {
                case .create:
                    guard operation.data?["user_id"]?.stringValue?.sameBytes(as: member) == true else {
                        return invalid("data.user_id must be '\(member)', the user part of the entity_id")
                    }
                    guard operation.data?["role"]?.stringValue == HouseholdState.Role.member.rawValue else {
                        return invalid("role must be 'member': a household's only owner is its creator")
                    }
                    guard !state.isOwned(by: member) else { return invalid("'\(member)' owns household '\(household)'") }
                case .update:
                    return invalid("memberships cannot be updated: remove the member and add them again")
                case .delete:
                    guard !state.isOwned(by: member) else {
                        return invalid("the owner cannot leave household '\(household)'; delete the household to archive it")
                    }
                }
                // Membership changes apply in arrival order, and a removed member can be added again.
                return .success(clientWins)

            default:
                guard let state, state.isActiveMember(user) else {
                    return deny("you are not a member of household '\(household)'")
                }
                return .success(type)
            }
        }

        /// Keeps the household tables in step with the built-in entities; returns entities the
        /// operation writes besides its own (the creator's membership).
        mutating func applyHouseholdEffects(_ operation: SyncOperation, type: EntityTypeConfig, key: EntityKey, state: inout EntityState) -> [EntityState] {
            guard let household = key.scope.householdID else { return [] }
            var sideEffects: [EntityState] = []
            switch type.builtIn {
            case .households:
                if households[key.scope] == nil {
                    households[key.scope] = HouseholdState(id: household, ownerID: user, members: [ExactKey(user): .owner])
                    touchedHouseholds.insert(key.scope)
                    wakeUsers.insert(ExactKey(user))
                    let membership = HouseholdIDs.membershipKey(household: household, user: user)
                    sideEffects.append(
                        EntityState(
                            key: membership,
                            version: (entities[membership]?.version ?? 0) + 1,
                            data: ["user_id": .string(user), "role": .string(HouseholdState.Role.owner.rawValue)],
                            clientTimestamp: state.clientTimestamp,
                            updatedAt: applier.now
                        )
                    )
                }
                guard var household = households[key.scope] else { return sideEffects }
                if state.isDeleted {
                    household.archived = true
                    wakeUsers.formUnion(household.members.keys)
                    touchedHouseholds.insert(key.scope)
                    households[key.scope] = household
                } else {
                    state.data?["owner"] = .string(household.ownerID)
                }
            case .householdMembers:
                guard var household = households[key.scope],
                    let member = HouseholdIDs.splitMembershipID(key.entityID, household: household.id)?.user
                else { return sideEffects }
                if state.isDeleted {
                    household.members.removeValue(forKey: ExactKey(member))
                } else {
                    household.members[ExactKey(member)] = .member
                }
                households[key.scope] = household
                touchedHouseholds.insert(key.scope)
                wakeUsers.insert(ExactKey(member))
            default:
                break
            }
            return sideEffects
        }

        /// Each entity's final state, in the order of its last write: filtered in place, as a sort
        /// by that order would hash two keys per comparison.
        func finalWrites() -> [EntityState] {
            if lastWrite.count == written.count { return written }
            return written.indices.compactMap { lastWrite[written[$0].key] == $0 ? written[$0] : nil }
        }

        func outcome() -> BatchOutcome {
            BatchOutcome(
                results: results,
                writes: finalWrites(),
                recorded: newRecords,
                households: touchedHouseholds.sorted().compactMap { households[$0] },
                wakeUsers: wakeUsers
            )
        }
    }
}
