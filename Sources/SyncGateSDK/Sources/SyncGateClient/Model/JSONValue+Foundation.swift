public import Foundation
public import SyncGateWire

extension JSONValue {
    /// The JSON form of an `Encodable` value (an app's model type), through `JSONEncoder`.
    public init(encoding value: some Encodable, encoder: JSONEncoder = JSONEncoder()) throws {
        self = try JSONValue(parsing: Array(try encoder.encode(value)))
    }

    /// Decodes this value as `type` (an app's model type), through `JSONDecoder`.
    public func decode<T: Decodable>(as type: T.Type = T.self, decoder: JSONDecoder = JSONDecoder()) throws -> T {
        try decoder.decode(type, from: Data(serializedBytes()))
    }
}
