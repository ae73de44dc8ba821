import SyncGateWire
/// How one entity type syncs: its scope, conflict policy and field rules.
public struct EntityTypeConfig: Sendable, Hashable {
    public enum ScopeKind: String, Sendable, CaseIterable {
        case user, household
    }

    public enum Policy: String, Sendable, CaseIterable {
        case lww
        case clientWins = "client_wins"
        case serverWins = "server_wins"
        case fieldMerge = "field_merge"
        case itemsMerge = "items_merge"
    }

    /// Who wins when two timestamps are equal.
    public enum TieBreak: String, Sendable, CaseIterable {
        case server, client
    }

    /// The array an `items_merge` type merges item by item.
    public struct ItemsConfig: Sendable, Hashable {
        public var path: String
        public var idField: String
        public var updatedAtField: String
        public var deletedAtField: String

        public init(path: String = "items", idField: String = "id", updatedAtField: String = "updatedAt", deletedAtField: String = "deletedAt") {
            self.path = path
            self.idField = idField
            self.updatedAtField = updatedAtField
            self.deletedAtField = deletedAtField
        }
    }

    public enum FieldType: String, Sendable, CaseIterable {
        case string, number, integer, boolean, object, array, date, timestamp
    }

    public struct FieldRule: Sendable, Hashable {
        public var name: String
        public var type: FieldType
        public var required: Bool

        public init(name: String, type: FieldType, required: Bool) {
            self.name = name
            self.type = type
            self.required = required
        }
    }

    /// Writes are refused while the referenced parent entity is archived.
    public struct ParentRule: Sendable, Hashable {
        public var parentType: String
        public var referenceField: String
        public var archivedField: String
        public var errorCode: String

        public init(parentType: String, referenceField: String, archivedField: String = "archived", errorCode: String = "PROJECT_ARCHIVED") {
            self.parentType = parentType
            self.referenceField = referenceField
            self.archivedField = archivedField
            self.errorCode = errorCode
        }
    }

    /// Types whose behaviour the server implements itself.
    public enum BuiltIn: String, Sendable, Hashable, CaseIterable {
        case households
        case householdMembers = "household_members"
        case dailySummaries
    }

    public var name: String
    public var scope: ScopeKind
    public var policy: Policy
    public var ties: TieBreak
    public var items: ItemsConfig?
    public var fields: [FieldRule]
    public var parent: ParentRule?
    public var readOnly: Bool
    public var builtIn: BuiltIn?

    public init(
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
public struct Collections: Sendable, Hashable {
    public private(set) var types: [String: EntityTypeConfig]
    /// How large any stored entity may grow (the deployment's settings, not the types file).
    public var documentLimits = DocumentLimits()

    /// Builds a registry from declared types plus the built-in ones (households, memberships, summaries).
    public init(declared: [EntityTypeConfig]) {
        var types: [String: EntityTypeConfig] = [:]
        for type in declared { types[type.name] = type }
        for type in Self.builtInTypes { types[type.name] = type }
        self.types = types
    }

    public subscript(name: String) -> EntityTypeConfig? { types[name] }

    public static let builtInTypes: [EntityTypeConfig] = [
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

    public static var reservedNames: Set<String> { Set(builtInTypes.map(\.name)) }
}
