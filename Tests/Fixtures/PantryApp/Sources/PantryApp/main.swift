import Foundation
import SyncGateClient

// Offline, as an app on a plane: writes, queries and the status work without a server. The
// server URL is one nothing listens on; the one sync attempt fails and the status says so.
let folder = FileManager.default.temporaryDirectory.appending(path: "pantry-app-\(UUID().uuidString)").path
try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(atPath: folder) }

let pantry = try Pantry(serverURL: URL(string: "http://127.0.0.1:9")!, databasePath: folder + "/alice.sqlite", household: "home") { "token" }
try await pantry.stock("milk", PantryItem(name: "Milk", quantity: 1, category: "dairy"))
try await pantry.stock("eggs", PantryItem(name: "Eggs", quantity: 12, category: "dairy"))
try await pantry.stock("salt", PantryItem(name: "Salt", quantity: 0, category: "spices"))
let low = try await pantry.client.read(pantry.runningLow()).map(\.entityID)
let dairy = try await pantry.items(in: "dairy").map(\.name)
do { try await pantry.client.syncOnce(deadline: .now + .seconds(30)) } catch {}
let status = pantry.client.status
print("running low: \(low.joined(separator: ", ")); dairy: \(dairy.joined(separator: ", ")); pending \(status.pendingWrites); \(status.connection)")
try await pantry.client.signOut(unregisteringPush: false)
