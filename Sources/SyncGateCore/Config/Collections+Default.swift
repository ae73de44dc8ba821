import SyncGateWire
extension Collections {
    /// The built-in entity types: `Resources/collections.yaml`, embedded in the binary (and linked
    /// from `config/collections.yaml` as the example to start a deployment's own file from).
    package static let defaultYAML = String(decoding: PackageResources.collections_yaml, as: UTF8.self)

    /// The default registry: the five reference apps plus the built-in types.
    package static let `default`: Collections = {
        do {
            return try Collections.parse(yaml: defaultYAML, source: "built-in default")
        } catch {
            fatalError("the built-in entity types do not parse: \(error)")
        }
    }()
}
