import SyncGateWire
import Yams

/// A configuration file that cannot be served; the message names the file, the type and the key.
package struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    package var message: String
    package init(_ message: String) { self.message = message }
    package var description: String { message }
}

extension Collections {
    /// Parses an entity-type file:
    ///
    /// ```yaml
    /// types:
    ///   timeEntries:
    ///     scope: user            # user | household
    ///     policy: lww            # lww | client_wins | server_wins | field_merge | items_merge
    ///     ties: server           # server | client
    ///     fields:
    ///       minutes: {type: number, required: true}
    ///     parent: {type: projects, field: project_id, archived_field: archived, error_code: PROJECT_ARCHIVED}
    /// ```
    package static func parse(yaml: String, source: String) throws(ConfigurationError) -> Collections {
        let document: Any?
        do {
            document = try Yams.load(yaml: yaml)
        } catch {
            throw ConfigurationError("\(source): not valid YAML: \(error)")
        }
        guard let root = document as? [String: Any] else {
            throw ConfigurationError("\(source): expected a mapping with a 'types' key at the top level")
        }
        try checkKeys(root, allowed: ["types"], context: "\(source)")
        guard let typesNode = root["types"] as? [String: Any], !typesNode.isEmpty else {
            throw ConfigurationError("\(source): key 'types' must be a non-empty mapping of entity type names")
        }
        var declared: [EntityTypeConfig] = []
        for name in typesNode.keys.sorted() {
            let context = "\(source): type '\(name)'"
            guard isValidTypeName(name) else {
                throw ConfigurationError("\(context): a type name is 1 to 64 letters, digits or '_', starting with a letter")
            }
            guard !reservedNames.contains(name) else {
                throw ConfigurationError("\(context): the name is reserved for a built-in type")
            }
            guard let node = typesNode[name] as? [String: Any] else {
                throw ConfigurationError("\(context): expected a mapping")
            }
            declared.append(try parseType(name: name, node: node, context: context))
        }
        let collections = Collections(declared: declared)
        try collections.checkReferences(source: source)
        return collections
    }

    static func parseType(name: String, node: [String: Any], context: String) throws(ConfigurationError) -> EntityTypeConfig {
        try checkKeys(node, allowed: ["scope", "policy", "ties", "items", "fields", "parent", "read_only"], context: context)
        let scope = try enumValue(node["scope"], EntityTypeConfig.ScopeKind.self, key: "scope", context: context) ?? .user
        let policy = try enumValue(node["policy"], EntityTypeConfig.Policy.self, key: "policy", context: context) ?? .lww
        let ties = try enumValue(node["ties"], EntityTypeConfig.TieBreak.self, key: "ties", context: context)
        if ties != nil, policy == .clientWins || policy == .serverWins {
            throw ConfigurationError("\(context): key 'ties': only lww, field_merge and items_merge compare timestamps")
        }
        var readOnly = false
        if let value = node["read_only"] {
            guard let flag = value as? Bool else { throw ConfigurationError("\(context): key 'read_only': expected true or false") }
            readOnly = flag
        }

        var items: EntityTypeConfig.ItemsConfig?
        if let value = node["items"] {
            guard policy == .itemsMerge else {
                throw ConfigurationError("\(context): key 'items': only an items_merge type has an items array")
            }
            guard let itemsNode = value as? [String: Any] else {
                throw ConfigurationError("\(context): key 'items': expected a mapping")
            }
            let itemsContext = "\(context): key 'items'"
            try checkKeys(itemsNode, allowed: ["path", "id_field", "updated_at_field", "deleted_at_field"], context: itemsContext)
            let defaults = EntityTypeConfig.ItemsConfig()
            items = EntityTypeConfig.ItemsConfig(
                path: try fieldName(itemsNode["path"], key: "path", context: itemsContext) ?? defaults.path,
                idField: try fieldName(itemsNode["id_field"], key: "id_field", context: itemsContext) ?? defaults.idField,
                updatedAtField: try fieldName(itemsNode["updated_at_field"], key: "updated_at_field", context: itemsContext)
                    ?? defaults.updatedAtField,
                deletedAtField: try fieldName(itemsNode["deleted_at_field"], key: "deleted_at_field", context: itemsContext)
                    ?? defaults.deletedAtField
            )
        }

        var fields: [EntityTypeConfig.FieldRule] = []
        if let value = node["fields"] {
            guard let fieldsNode = value as? [String: Any] else {
                throw ConfigurationError("\(context): key 'fields': expected a mapping of field names")
            }
            for fieldName in fieldsNode.keys.sorted() {
                let fieldContext = "\(context): key 'fields.\(fieldName)'"
                guard let ruleNode = fieldsNode[fieldName] as? [String: Any] else {
                    throw ConfigurationError("\(fieldContext): expected a mapping like {type: string, required: true}")
                }
                try checkKeys(ruleNode, allowed: ["type", "required"], context: fieldContext)
                guard let type = try enumValue(ruleNode["type"], EntityTypeConfig.FieldType.self, key: "type", context: fieldContext) else {
                    throw ConfigurationError("\(fieldContext): key 'type' is required")
                }
                var required = false
                if let flag = ruleNode["required"] {
                    guard let bool = flag as? Bool else {
                        throw ConfigurationError("\(fieldContext): key 'required': expected true or false")
                    }
                    required = bool
                }
                fields.append(.init(name: fieldName, type: type, required: required))
            }
        }

        var parent: EntityTypeConfig.ParentRule?
        if let value = node["parent"] {
            guard let parentNode = value as? [String: Any] else {
                throw ConfigurationError("\(context): key 'parent': expected a mapping")
            }
            let parentContext = "\(context): key 'parent'"
            try checkKeys(parentNode, allowed: ["type", "field", "archived_field", "error_code"], context: parentContext)
            guard let parentType = parentNode["type"] as? String else {
                throw ConfigurationError("\(parentContext): key 'type' is required (the parent entity type)")
            }
            guard let referenceField = try fieldName(parentNode["field"], key: "field", context: parentContext) else {
                throw ConfigurationError("\(parentContext): key 'field' is required (the field holding the parent's id)")
            }
            let errorCode = (parentNode["error_code"] as? String) ?? "PROJECT_ARCHIVED"
            guard isValidErrorCode(errorCode) else {
                throw ConfigurationError("\(parentContext): key 'error_code': use upper-case letters, digits and '_'")
            }
            parent = .init(
                parentType: parentType,
                referenceField: referenceField,
                archivedField: try fieldName(parentNode["archived_field"], key: "archived_field", context: parentContext) ?? "archived",
                errorCode: errorCode
            )
        }

        return EntityTypeConfig(
            name: name,
            scope: scope,
            policy: policy,
            ties: ties ?? .server,
            items: items,
            fields: fields,
            parent: parent,
            readOnly: readOnly
        )
    }

    func checkReferences(source: String) throws(ConfigurationError) {
        for type in types.values.sorted(by: { $0.name < $1.name }) {
            guard let parent = type.parent else { continue }
            let context = "\(source): type '\(type.name)': key 'parent.type'"
            guard let parentType = types[parent.parentType] else {
                throw ConfigurationError("\(context): unknown entity type '\(parent.parentType)'")
            }
            guard parentType.scope == type.scope else {
                throw ConfigurationError("\(context): the parent '\(parent.parentType)' must have the same scope (\(type.scope.rawValue))")
            }
        }
    }

    static func checkKeys(_ node: [String: Any], allowed: Set<String>, context: String) throws(ConfigurationError) {
        for key in node.keys.sorted() where !allowed.contains(key) {
            throw ConfigurationError("\(context): unknown key '\(key)' (expected one of \(allowed.sorted().joined(separator: ", ")))")
        }
    }

    static func enumValue<Value: RawRepresentable & CaseIterable>(
        _ value: Any?,
        _ type: Value.Type,
        key: String,
        context: String
    ) throws(ConfigurationError) -> Value? where Value.RawValue == String {
        guard let value else { return nil }
        let allowed = Value.allCases.map(\.rawValue).joined(separator: ", ")
        guard let text = value as? String, let parsed = Value(rawValue: text) else {
            throw ConfigurationError("\(context): key '\(key)': '\(value)' is not one of \(allowed)")
        }
        return parsed
    }

    static func fieldName(_ value: Any?, key: String, context: String) throws(ConfigurationError) -> String? {
        guard let value else { return nil }
        guard let text = value as? String, !text.isEmpty, text.count <= 128 else {
            throw ConfigurationError("\(context): key '\(key)': expected a field name")
        }
        return text
    }

    static func isValidTypeName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, (1...64).contains(name.unicodeScalars.count),
            first.properties.isAlphabetic, first.isASCII
        else { return false }
        return name.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_") }
    }

    static func isValidErrorCode(_ code: String) -> Bool {
        !code.isEmpty && code.count <= 64
            && code.unicodeScalars.allSatisfy { ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "_" }
    }
}
