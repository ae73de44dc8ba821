import SyncGateWire
/// How one entity type syncs: its scope, conflict policy and field rules.
package struct EntityTypeConfig: Sendable, Hashable {
    package enum ScopeKind: String, Sendable, CaseIterable {
        case user, household
    }

    package enum Policy: String, Sendable, CaseIterable {
        case lww
        case clientWins = "client_wins"
        case serverWins = "server_wins"
        case fieldMerge = "field_merge"
        case itemsMerge = "items_merge"
    }

    /// Who wins when two timestamps are equal.
    package enum TieBreak: String, Sendable, CaseIterable {
        case server, client
    }

    /// The array an `items_merge` type merges item by item.
    package struct ItemsConfig: Sendable, Hashable {
        package var path: String = "items"
        package var idField: String = "id"
        package var updatedAtField: String = "updatedAt"
        package var deletedAtField: String = "deletedAt"
    }

    package enum FieldType: String, Sendable, CaseIterable {
        case string, number, integer, boolean, object, array, date, timestamp
    }

    package struct FieldRule: Sendable, Hashable {
        package var name: String
        package var type: FieldType
        package var required: Bool
    }

    /// Writes are refused while the referenced parent entity is archived.
    package struct ParentRule: Sendable, Hashable {
        package var parentType: String
        package var referenceField: String
        package var archivedField: String = "archived"
        package var errorCode: String = "PROJECT_ARCHIVED"
    }

    /// Types whose behaviour the server implements itself.
    package enum BuiltIn: String, Sendable, Hashable, CaseIterable {
        case households
        case householdMembers = "household_members"
        case dailySummaries
    }

    package var name: String
    package var scope: ScopeKind
    package var policy: Policy
    package var ties: TieBreak
    package var items: ItemsConfig?
    package var fields: [FieldRule]
    package var parent: ParentRule?
    package var readOnly: Bool
    package var builtIn: BuiltIn?

    package init(
        name: String,
        scope: ScopeKind = .user,
        policy: Policy = .lww,
        ties: TieBreak = .server,
        items: ItemsConfig? = nil,
        fields: [FieldRule] = [],
        parent: ParentRule? = nil,
        readOnly: Bool = false,
        builtIn: BuiltIn? = nil
    ) {
        self.name = name
        self.scope = scope
        self.policy = policy
        self.ties = ties
        self.items = policy == .itemsMerge ? (items ?? ItemsConfig()) : items
        self.fields = fields
        self.parent = parent
        self.readOnly = readOnly
        self.builtIn = builtIn
    }
}

/// The entity types one deployment serves.
package struct Collections: Sendable, Hashable {
    package private(set) var types: [String: EntityTypeConfig]
    /// How large any stored entity may grow (the deployment's settings, not the types file).
    package var documentLimits = DocumentLimits()

    /// Builds a registry from declared types plus the built-in ones (households, memberships, summaries).
    package init(declared: [EntityTypeConfig]) {
        var types: [String: EntityTypeConfig] = [:]
        for type in declared { types[type.name] = type }
        for type in Self.builtInTypes { types[type.name] = type }
        self.types = types
    }

    package subscript(name: String) -> EntityTypeConfig? { types[name] }

    package static let builtInTypes: [EntityTypeConfig] = [
        EntityTypeConfig(name: "households", scope: .household, policy: .lww, builtIn: .households),
        EntityTypeConfig(
            name: "household_members",
            scope: .household,
            policy: .lww,
            fields: [
                .init(name: "user_id", type: .string, required: true),
                .init(name: "role", type: .string, required: true),
            ],
            builtIn: .householdMembers
        ),
        EntityTypeConfig(name: "dailySummaries", scope: .user, policy: .serverWins, readOnly: true, builtIn: .dailySummaries),
    ]

    package static var reservedNames: Set<String> { Set(builtInTypes.map(\.name)) }
}
