import Foundation
import SyncGateStorage
import SyncGateTestSupport
import SyncGateWire
import Testing

/// `syncgate admin keys create | list | revoke`, as an operator runs them.
@Suite(.timeLimit(.minutes(10))) struct AdminKeysCommandTests {
    @Test(arguments: Driver.selected)
    func anOperatorCreatesListsAndRevokesAServiceKey(_ driver: Driver) async throws {
        let (url, _, cleanup) = try await MigrateCommandTests.database(driver)
        defer { cleanup() }
        func syncgate(_ arguments: String...) async throws -> (status: Int32?, output: String) {
            try await MigrateCommandTests.syncgate(arguments, url: url)
        }
        let migrated = try await syncgate("migrate")
        #expect(migrated.status == 0, "\(migrated.output)")

        // Created: the key is printed once, with its scopes.
        let created = try await syncgate("admin", "keys", "create", "billing", "--scope", "write", "--scope", "read", "--json")
        #expect(created.status == 0, "\(created.output)")
        let answer = try #require(created.output.split(separator: "\n").compactMap { try? JSONParser().parse(Array($0.utf8)) }.first)
        let key = try #require(answer["key"]?.stringValue)
        #expect(key.hasPrefix("sgk_"))
        #expect(answer["scopes"] == ["read", "write"])

        // Listed without the key; the name cannot be taken twice; bad input changes nothing.
        let listed = try await syncgate("admin", "keys", "list", "--json")
        #expect(listed.status == 0)
        #expect(!listed.output.contains(key))
        #expect(listed.output.contains(#""hint":"\#(key.suffix(4))""#), "\(listed.output)")
        func refused(_ arguments: String..., saying message: String) async throws {
            let result = try await MigrateCommandTests.syncgate(arguments, url: url)
            #expect(result.status != 0 && result.output.contains(message), "\(arguments): \(result.output)")
        }
        try await refused("admin", "keys", "create", "billing", "--scope", "read", saying: "a key named 'billing' exists")
        try await refused("admin", "keys", "create", "bad name", "--scope", "read", saying: "1 to 64 characters")
        try await refused("admin", "keys", "create", "noscope", saying: "give at least one --scope")
        try await refused("admin", "keys", "create", "odd", "--scope", "root", saying: "unknown scope 'root'")
        try await refused("admin", "keys", "create", "root", "--scope", "admin", "--user", "bob", saying: "takes no users or households")
        // A key for Bob and the household home only.
        let kiosk = try await syncgate("admin", "keys", "create", "kiosk", "--scope", "write", "--user", "bob", "--household", "home")
        #expect(kiosk.status == 0 && kiosk.output.contains("for users bob; households home"), "\(kiosk.output)")
        let table = try await syncgate("admin", "keys", "list")
        #expect(table.output.split(separator: "\n").filter { $0.hasPrefix("billing\t") && $0.contains("\teveryone\t") }.count == 1, "\(table.output)")
        #expect(table.output.split(separator: "\n").contains { $0.hasPrefix("kiosk\t") && $0.contains("\tusers bob; households home\t") }, "\(table.output)")
        #expect(!table.output.contains("noscope") && !table.output.contains("odd\t"))

        // Revoked once; the listing shows when.
        let revoked = try await syncgate("admin", "keys", "revoke", "billing")
        #expect(revoked.status == 0, "\(revoked.output)")
        try await refused("admin", "keys", "revoke", "billing", saying: "no valid key is named 'billing'")
        let after = try await syncgate("admin", "keys", "list", "--json")
        let keys = try #require(after.output.split(separator: "\n").compactMap { try? JSONParser().parse(Array($0.utf8)) }.first?["keys"]?.arrayValue)
        #expect(keys.count == 2)
        #expect(keys.first?["revoked_at"]?.stringValue != nil)
        #expect(keys.last?["reach"] == ["users": ["bob"], "households": ["home"]])
    }
}
