import Foundation
import Testing

@testable import SyncGateClient

/// The SDK's bridge between JSON values and an app's `Codable` models.
@Suite("JSON values and app models", .timeLimit(.minutes(10)))
struct JSONValueTests {
    @Test("app models encode to and decode from JSON values")
    func codable() throws {
        struct Item: Codable, Equatable {
            var name: String
            var quantity: Int
            var tags: [String]
        }
        let item = Item(name: "Milk", quantity: 2, tags: ["dairy"])
        let value = try JSONValue(encoding: item)
        #expect(value == ["name": "Milk", "quantity": 2, "tags": ["dairy"]])
        #expect(try value.decode(as: Item.self) == item)
        let decoded = try JSONDecoder().decode(JSONValue.self, from: Data(#"{"a":[true,null,1.5,"x",3]}"#.utf8))
        #expect(decoded == ["a": [true, nil, 1.5, "x", 3]])
    }
}
