import ArgumentParser
import Foundation
import SyncGateClient

/// The SyncGate pantry demo: Alice's phone and Bob's tablet share a household pantry through a
/// running `syncgate serve`, with offline edits, a conflict and live updates.
@main
struct PantryDemo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "syncgate-demo",
        abstract: "Two devices share a household pantry through a running `syncgate serve`: offline edits, a conflict, live updates."
    )

    @Option(help: "The server's URL")
    var server = "http://127.0.0.1:8080"

    @Option(help: "The server's development signing secret, to sign tokens for alice and bob (what `syncgate serve` keeps beside its SQLite file)")
    var secretFile = "data/jwt-secret"

    @Option(help: "A token for alice (instead of signing one with --secret-file)")
    var aliceToken: String?

    @Option(help: "A token for bob (instead of signing one with --secret-file)")
    var bobToken: String?

    @Option(help: "Where the two devices keep their databases (default: a new temporary folder)")
    var dataFolder: String?

    @Option(help: "The household's id (default: a new one, so the demo can run again on the same server)")
    var household: String?

    func run() async throws {
        var given: [String: String] = [:]
        given["alice"] = aliceToken
        given["bob"] = bobToken
        let tokens = try await DemoTokens(secretFile: given.count == 2 ? nil : secretFile, given: given)
        let folder = dataFolder ?? NSTemporaryDirectory() + "syncgate-demo-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let pantry = household ?? "pantry-\(UUID().uuidString.prefix(4).lowercased())"

        guard let serverURL = URL(string: server), serverURL.scheme != nil else { throw ValidationError("--server: not a URL: \(server)") }
        let alice = try PantryDevice(name: "alice-phone", user: "alice", household: pantry, server: serverURL, folder: folder, tokens: tokens)
        let bob = try PantryDevice(name: "bob-tablet", user: "bob", household: pantry, server: serverURL, folder: folder, tokens: tokens)
        print("SyncGate pantry demo: \(server), household \(pantry), device databases in \(folder)")

        section("1. Alice sets up the pantry and invites Bob")
        try await alice.client.createHousehold(pantry, name: "Our pantry")
        alice.say("create household \(pantry)")
        try await alice.stock("milk", 2, unit: "l")
        try await alice.stock("eggs", 12)
        try await alice.client.addMember("bob", to: pantry)
        alice.say("add bob to \(pantry)")
        try await alice.show("pantry (* = not yet confirmed by the server)")
        try await alice.sync()
        try await bob.sync()
        bob.say("households: \(try await bob.client.households().joined(separator: ", "))")
        try await bob.show()

        section("2. Offline: both change the milk, Bob adds bread (no sync)")
        try await bob.stock("milk", 3, note: "(offline) ")
        try await Task.sleep(for: .milliseconds(20))
        try await alice.stock("milk", 1, note: "(offline) ")
        try await bob.stock("bread", 1, note: "(offline) ")
        try await alice.show()
        try await bob.show()

        section("3. Back online: Alice syncs first; Bob's older milk edit conflicts (inventory is last-writer-wins)")
        try await alice.sync()
        try await bob.sync()
        try await bob.show()
        try await alice.sync()
        try await alice.show()

        section("4. Live: both devices follow the server's events; no sync calls from here on")
        alice.client.startLive()
        bob.client.startLive()
        // Let both event streams open, so the times below are those of a device already live.
        try await Task.sleep(for: .milliseconds(300))
        let started = ContinuousClock.now
        try await alice.stock("coffee", 1)
        try await waitUntil(bob, shows: "coffee 1")
        bob.say("live: coffee arrived \(Self.milliseconds(since: started)) ms after Alice wrote it")
        let replied = ContinuousClock.now
        try await bob.stock("eggs", 10)
        try await waitUntil(alice, shows: "eggs 10", confirmed: true)
        alice.say("live: eggs 10 arrived \(Self.milliseconds(since: replied)) ms after Bob wrote it")
        await alice.client.stopLive()
        await bob.client.stopLive()

        section("Both devices agree (after a last sync each)")
        try await alice.sync()
        try await bob.sync()
        try await alice.show()
        try await bob.show()
        await alice.client.close()
        await bob.client.close()
    }

    func section(_ title: String) {
        print("\n== \(title)")
    }

    /// Waits until the device's pantry line contains `text` (confirmed by the server if asked), for at most ten seconds.
    func waitUntil(_ device: PantryDevice, shows text: String, confirmed: Bool = false) async throws {
        let found = try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                for try await items in device.client.observe(type: "inventory", in: .household(device.household)) {
                    let line = try await device.pantryLine()
                    if line.contains(text), !confirmed || items.allSatisfy({ !$0.hasPendingWrites }) { return true }
                }
                return false
            }
            group.addTask {
                try await Task.sleep(for: .seconds(10))
                return false
            }
            defer { group.cancelAll() }
            return try await group.next() ?? false
        }
        guard found else { throw DemoError("\(device.name) did not show \(text) within ten seconds") }
    }

    static func milliseconds(since start: ContinuousClock.Instant) -> Int {
        let elapsed = (ContinuousClock.now - start).components
        return Int(elapsed.seconds * 1000 + elapsed.attoseconds / 1_000_000_000_000_000)
    }
}
