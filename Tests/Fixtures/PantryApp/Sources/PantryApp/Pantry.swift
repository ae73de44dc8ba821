import Foundation
import SyncGateClient

/// The pantry app's data layer as docs/sdk.md shows it: one client per signed-in user, an index
/// for the app's main query, typed models, and the queries its screens observe.
struct PantryItem: Codable, Equatable, Sendable {
    var name: String
    var quantity: Int
    var category: String
}

final class Pantry: Sendable {
    let client: SyncClient
    let household: String

    /// The query of the "running low" screen: items of the household with at most `threshold` left, fewest first.
    func runningLow(threshold: Int = 2) -> EntityQuery {
        EntityQuery("inventory", in: .household(household))
            .filter(.lessThanOrEqual("quantity", .int(Int64(threshold))))
            .sorted(by: "quantity")
            .sorted(by: "name")
    }

    init(serverURL: URL, databasePath: String, household: String, token: @escaping @Sendable () async throws -> String) throws {
        var configuration = SyncClient.Configuration(serverURL: serverURL, databasePath: databasePath, token: token)
        configuration.indexes = [LocalIndex(type: "inventory", fields: ["quantity", "name"])]
        client = try SyncClient(configuration)
        self.household = household
    }

    func stock(_ id: String, _ item: PantryItem) async throws {
        try await client.write(type: "inventory", id: id, value: item, household: household)
    }

    func items(in category: String) async throws -> [PantryItem] {
        try await client.read(EntityQuery("inventory", in: .household(household)).filter(.equals("category", .string(category))).sorted(by: "name"))
            .map { try $0.decode(as: PantryItem.self) }
    }
}

#if canImport(SwiftUI)
import SwiftUI

/// The "running low" screen: the observed query's result and the sync status.
@available(iOS 17, macOS 14, *)
struct RunningLowView: View {
    let pantry: Pantry
    let status: SyncStatusModel
    @State private var items: [SyncEntity] = []

    var body: some View {
        List(items) { item in
            Text("\(item.data["name"]?.stringValue ?? item.entityID): \(item.data["quantity"]?.intValue ?? 0)")
        }
        .overlay(alignment: .bottom) {
            if status.status.isDownloading { ProgressView() }
            else if status.status.pendingWrites > 0 { Text("\(status.status.pendingWrites) changes not yet synced") }
        }
        .task {
            do {
                for try await result in pantry.client.observe(pantry.runningLow()) { items = result }
            } catch {}
        }
    }
}
#endif
