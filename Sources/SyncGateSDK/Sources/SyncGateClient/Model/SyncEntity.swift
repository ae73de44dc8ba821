public import SyncGateWire
/// An entity as the app sees it: the server's document with the device's pending writes applied.
public struct SyncEntity: Sendable, Hashable, Identifiable {
    /// The entity's type, id and household.
    public var key: EntityKey
    /// The document the app reads.
    public var data: JSONObject
    /// The version of the pulled server document that ``data`` is built on; `nil` when no
    /// server document has been pulled yet (an entity created on this device).
    public var version: Int64?
    /// Whether ``data`` includes writes of this device that the server has not decided yet.
    public var hasPendingWrites: Bool

    /// Makes an entity (for tests and previews; the client returns them from reads).
    public init(key: EntityKey, data: JSONObject, version: Int64?, hasPendingWrites: Bool) {
        self.key = key
        self.data = data
        self.version = version
        self.hasPendingWrites = hasPendingWrites
    }

    /// The key, as the identity of the entity in lists.
    public var id: EntityKey { key }
    /// The entity type.
    public var entityType: String { key.entityType }
    /// The entity id.
    public var entityID: String { key.entityID }
    /// The household, or `nil` for the user's own entities.
    public var householdID: String? { key.householdID }

    /// Decodes ``data`` as an app model type.
    public func decode<T: Decodable>(as type: T.Type = T.self) throws -> T {
        try JSONValue.object(data).decode(as: type)
    }
}
