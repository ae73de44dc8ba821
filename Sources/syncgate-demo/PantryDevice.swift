import Foundation
import SyncGateClient

/// One simulated device of the pantry app: a SyncGate client on its own database file, and the
/// app's few screens as printed lines.
struct PantryDevice: Sendable {
    let name: String
    let client: SyncClient
    let household: String

    init(name: String, user: String, household: String, server: URL, folder: String, tokens: DemoTokens) throws {
        self.name = name
        self.household = household
        client = try SyncClient(
            SyncClient.Configuration(serverURL: server, databasePath: "\(folder)/\(name).sqlite", deviceID: name) {
                try await tokens.token(for: user)
            }
        )
    }

    func say(_ text: String) {
        print("\(name.padding(toLength: 12, withPad: " ", startingAt: 0)) \(text)")
    }

    /// Sets an item's quantity (adding the item if the pantry does not have it).
    func stock(_ item: String, _ quantity: Int, unit: String? = nil, note: String = "") async throws {
        var data: JSONObject = ["name": .string(item.capitalized), "quantity": .int(Int64(quantity))]
        if let existing = try await client.read(type: "inventory", id: item, household: household) {
            data = existing.data
            data["quantity"] = .int(Int64(quantity))
        } else if let unit {
            data["unit"] = .string(unit)
        }
        try await client.write(type: "inventory", id: item, data: data, household: household)
        say("\(note)\(item) → \(quantity)")
    }

    /// Pushes and pulls, and tells what the server decided.
    func sync() async throws {
        let report = try await client.sync()
        var parts: [String] = []
        for outcome in report.settled {
            parts.append("\(outcome.key.entityType)/\(outcome.key.entityID): \(Self.describe(outcome.result))")
        }
        if let reason = report.resynced { parts.append("started over (\(reason.rawValue))") }
        parts.append("pulled \(report.pulledChanges) change\(report.pulledChanges == 1 ? "" : "s")")
        say("sync    " + parts.joined(separator: " · "))
    }

    /// The pantry as this device shows it; `*` marks writes the server has not confirmed yet.
    func show(_ title: String = "pantry") async throws {
        say("\(title): " + (try await pantryLine()))
    }

    func pantryLine() async throws -> String {
        let items = try await client.read(type: "inventory", in: .household(household))
        guard !items.isEmpty else { return "(empty)" }
        return items.map { item in
            let quantity = item.data["quantity"]?.intValue.map(String.init) ?? "?"
            let unit = item.data["unit"]?.stringValue.map { " \($0)" } ?? ""
            return "\(item.entityID) \(quantity)\(unit)\(item.hasPendingWrites ? "*" : "")"
        }.joined(separator: " · ")
    }

    static func describe(_ result: WriteOutcome.Result) -> String {
        switch result {
        case .applied(let version): "applied (v\(version))"
        case .clientWins(let version): "applied over a concurrent change (client_wins, v\(version))"
        case .merged(let version, _): "merged (v\(version))"
        case .serverWins(let version, let data):
            "conflict, the server kept its version (server_wins, v\(version): \(data.map { JSONValue.object($0).description } ?? "deleted"))"
        case .duplicate(let version): "already applied (v\(version))"
        case .rejected(let code, let message): "rejected \(code): \(message)"
        }
    }
}
