import Foundation
import Synchronization
import HTTPTypes
import HummingbirdTesting
import SyncGateCore
import SyncGateStorage
import SyncGateClient
import SyncGateTestSupport
import Testing

/// The SDK against the production server (``HTTPHarness`` `.live`), on both drivers.
@Suite("Client against the server", .timeLimit(.minutes(10)))
struct ClientServerTests {
    @Test("two devices: a write reaches the other device; concurrent offline edits resolve by lww", arguments: Driver.selected)
    func twoDevices(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, setup: .live) { http in
            let devices = try Devices(http)
            let phone = try devices.make("alice", "phone")
            // The tablet waits 0 ms for pushes: every push answers 202 and is followed at /v1/jobs.
            let tablet = try devices.make("alice", "tablet") { $0.pushWait = .zero }

            let created = try await phone.write(type: "weightLogs", id: "w1", data: ["kg": 70.5, "date": "2026-01-15"])
            let first = try await phone.sync()
            #expect(first.settled == [WriteOutcome(idempotencyKey: created.idempotencyKey!, key: EntityKey(entityType: "weightLogs", entityID: "w1"), result: .applied(version: 1))])
            #expect(try await phone.read(type: "weightLogs", id: "w1") == SyncEntity(
                key: EntityKey(entityType: "weightLogs", entityID: "w1"), data: ["kg": 70.5, "date": "2026-01-15"], version: 1, hasPendingWrites: false
            ))
            try await tablet.sync()
            #expect(try await tablet.read(type: "weightLogs", id: "w1")?.data == ["kg": 70.5, "date": "2026-01-15"])

            // Both edit offline; the tablet's edit is later, so lww keeps it wherever it arrives.
            try await phone.update(type: "weightLogs", id: "w1", fields: ["kg": 71])
            try await Task.sleep(for: .milliseconds(5))
            try await tablet.update(type: "weightLogs", id: "w1", fields: ["kg": 72])
            #expect(try await tablet.sync().settled.map(\.result) == [.applied(version: 2)])
            #expect(try await phone.sync().settled.map(\.result) == [.serverWins(version: 2, data: ["kg": 72, "date": "2026-01-15"])])
            for device in [phone, tablet] {
                try await device.sync()
                #expect(try await device.read(type: "weightLogs", id: "w1")?.data == ["kg": 72, "date": "2026-01-15"])
                #expect(try await device.pendingWriteCount() == 0)
            }
        }
    }

    @Test("a device registers its push token; a nudge runs one sync and tells whether it brought data", arguments: Driver.selected)
    func pushTokenAndNudge(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, setup: .live) { http in
            let devices = try Devices(http)
            let phone = try devices.make("alice", "phone")
            let tablet = try devices.make("alice", "tablet")
            let token: [UInt8] = Array(0..<32)
            try await phone.registerPushToken(apnsToken: token, topic: "com.example.timetracker", environment: .sandbox)
            let stored = try await http.store.store.pushRegistration(DeviceKey(userID: "alice", deviceID: "phone"))
            #expect(stored?.registration == .apns(token: "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", topic: "com.example.timetracker", environment: .sandbox))

            // Not a nudge: nothing happens.
            #expect(try await phone.handleNudge(userInfo: ["aps": ["alert": "hi"]]) == false)
            try await phone.sync()
            #expect(try await phone.handleNudge(userInfo: ["type": "sync_nudge", "aps": ["content-available": 1]]) == false)
            // The tablet writes; the phone's nudge pulls it.
            try await tablet.write(type: "weightLogs", id: "w1", data: ["kg": 70, "date": "2026-01-15"])
            try await tablet.sync()
            #expect(try await phone.handleNudge(userInfo: ["type": "sync_nudge", "scopes": ["user"]]) == true)
            #expect(try await phone.read(type: "weightLogs", id: "w1")?.data == ["kg": 70, "date": "2026-01-15"])

            try await phone.unregisterPushToken()
            #expect(try await http.store.store.pushRegistration(DeviceKey(userID: "alice", deviceID: "phone")) == nil)
            // A malformed registration is the server's validation error.
            await #expect(throws: SyncGateClientError.self) {
                try await phone.registerPushToken(.apns(token: "zz", topic: "com.example.timetracker", environment: .sandbox))
            }
        }
    }

    @Test("queries on a declared index, sync status and a bootstrap's progress, tokens refreshed ahead, sign-out", arguments: Driver.selected)
    func queriesStatusLifecycle(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, setup: .live) { http in
            let devices = try Devices(http)
            let index = LocalIndex(type: "weightLogs", fields: ["date"])
            let phone = try devices.make("alice", "phone") { $0.indexes = [index] }
            for day in 1...12 {
                try await phone.write(type: "weightLogs", id: "w\(day)", data: ["kg": .double(70 + Double(day) / 10), "date": .string("2026-01-\(day < 10 ? "0" : "")\(day)")])
            }
            #expect(phone.status.pendingWrites == 12)
            try await phone.sync()
            #expect(phone.status.pendingWrites == 0 && phone.status.connection == .connected && phone.status.lastSyncedAt != nil)

            // The tablet bootstraps in pages of 5, with tokens that expire within the refresh margin.
            let issued = Atomic<Int>(0)
            let progress = Mutex<[DownloadProgress?]>([])
            let tabletBox = Mutex<SyncClient?>(nil)
            let tablet = try devices.make("alice", "tablet") {
                $0.indexes = [index]
                $0.pullPageSize = 5
                $0.token = {
                    issued.add(1, ordering: .relaxed)
                    return try await http.token("alice", ttl: 30)
                }
            } transport: { base in
                ProbeTransport(base: base) { request in
                    if request.path.hasPrefix("/v1/sync/pull") { progress.withLock { $0.append(tabletBox.withLock { $0 }?.status.download) } }
                }
            }
            tabletBox.withLock { $0 = tablet }
            let report = try await tablet.sync()
            #expect(report.pulledChanges == 12)
            let seen = progress.withLock { $0 }
            #expect(seen.count == 3)
            #expect(seen.first == DownloadProgress(isBootstrap: true))
            #expect(seen.last??.isBootstrap == true && seen.last??.changes == 10 && (seen.last??.bytes ?? 0) > 500)
            #expect(tablet.status.download == nil && tablet.status.lastError == nil)
            // The first request asked for a token, the second for a fresher one (it expires within
            // the 60 s margin); that one expires as soon, so the third used it rather than ask again.
            #expect(issued.load(ordering: .relaxed) == 2)

            let lastWeek = EntityQuery("weightLogs").filter(.between("date", "2026-01-06", "2026-01-12")).sorted(by: "date", .descending).limit(3)
            #expect(try await tablet.read(lastWeek).map(\.entityID) == ["w12", "w11", "w10"])
            var results = tablet.observe(lastWeek).makeAsyncIterator()
            #expect(try await results.next()?.map(\.entityID) == ["w12", "w11", "w10"])
            try await phone.write(type: "weightLogs", id: "w13", data: ["kg": 72, "date": "2026-01-13"])
            try await phone.update(type: "weightLogs", id: "w11", fields: ["date": "2026-01-05"])
            try await phone.sync()
            try await tablet.sync()
            #expect(try await results.next()?.map(\.entityID) == ["w12", "w10", "w9"])
            #expect(try await tablet.read(type: "weightLogs", id: "w11")?.data["date"] == "2026-01-05")

            // Sign-out: the server forgets the device's push address; the device forgets the user.
            try await tablet.registerPushToken(.fcm(token: "fcm-token-tablet"))
            #expect(try await http.store.store.pushRegistration(DeviceKey(userID: "alice", deviceID: "tablet")) != nil)
            try await tablet.signOut()
            #expect(try await http.store.store.pushRegistration(DeviceKey(userID: "alice", deviceID: "tablet")) == nil)
            let again = try devices.make("alice", "tablet")
            #expect(try await again.read(type: "weightLogs").isEmpty)
            #expect(again.status.lastSyncedAt == nil)
            try await again.sync()
            #expect(try await again.read(EntityQuery("weightLogs")).count == 13)
        }
    }

    @Test("field_merge keeps both devices' fields; items_merge merges items; summaries are derived and read-only", arguments: Driver.selected)
    func merges(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, setup: .live) { http in
            let devices = try Devices(http)
            let phone = try devices.make("alice", "phone")
            let tablet = try devices.make("alice", "tablet")
            try await phone.write(type: "userGoals", id: "goals", data: ["calories": 2000, "protein": 100])
            let log: JSONObject = ["loggedDate": "2026-01-15", "mealType": "lunch", "items": [["id": "rice", "calories": 200, "updatedAt": "2026-01-15T12:00:00.000Z"]]]
            try await phone.write(type: "foodLogs", id: "fl1", data: log)
            try await phone.sync()
            try await tablet.sync()

            try await phone.update(type: "userGoals", id: "goals", fields: ["calories": 1800])
            try await tablet.update(type: "userGoals", id: "goals", fields: ["protein": 120])
            try await tablet.update(type: "foodLogs", id: "fl1", fields: ["items": [
                ["id": "rice", "calories": 200, "updatedAt": "2026-01-15T12:00:00.000Z"], ["id": "soup", "calories": 150, "updatedAt": "2026-01-15T12:05:00.000Z"],
            ]])
            try await phone.update(type: "foodLogs", id: "fl1", fields: ["items": [["id": "rice", "calories": 250, "updatedAt": "2026-01-15T12:10:00.000Z"]]])
            try await phone.sync()
            let report = try await tablet.sync()
            #expect(Set(report.settled.map { "\($0.key.entityType):\(Self.status($0.result))" }) == ["userGoals:applied", "foodLogs:merged"])
            try await phone.sync()
            for device in [phone, tablet] {
                #expect(try await device.read(type: "userGoals", id: "goals")?.data == ["calories": 1800, "protein": 120])
                let items = try await device.read(type: "foodLogs", id: "fl1")?.data["items"]?.arrayValue ?? []
                #expect(Set(items.compactMap { "\($0["id"]?.stringValue ?? ""):\($0["calories"]?.numberValue ?? 0)" }) == ["rice:250.0", "soup:150.0"])
                let summary = try await device.read(type: "dailySummaries", id: "2026-01-15")
                #expect(summary?.data["calories"]?.numberValue == 400)
            }
            // Not declared read-only on this device: the write is local until the server refuses it.
            try await phone.write(type: "dailySummaries", id: "2026-01-15", data: ["calories": 1])
            let refused = try await phone.sync()
            #expect(refused.settled.count == 1 && refused.settled[0].rejectionCode != nil)
            #expect(try await phone.read(type: "dailySummaries", id: "2026-01-15")?.data["calories"]?.numberValue == 400)
            // Declared read-only: refused at once, nothing recorded.
            let watch = try devices.make("alice", "watch") { $0.readOnlyTypes = ["dailySummaries"] }
            await #expect(throws: SyncGateClientError.self) { try await watch.write(type: "dailySummaries", id: "2026-01-15", data: ["calories": 1]) }
            #expect(try await watch.pendingWriteCount() == 0)
        }
    }

    @Test("households: joining brings the data, leaving drops it, and a write after leaving is rejected and reported", arguments: Driver.selected)
    func households(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, setup: .live) { http in
            let devices = try Devices(http)
            let alice = try devices.make("alice", "alice-phone")
            let bob = try devices.make("bob", "bob-phone")
            let bobEvents = bob.events()

            try await alice.createHousehold("home", name: "Home")
            try await alice.write(type: "inventory", id: "milk", data: ["name": "Milk", "quantity": 2], household: "home")
            try await alice.addMember("bob", to: "home")
            #expect(try await alice.sync().settled.allSatisfy { if case .applied = $0.result { true } else { false } })
            #expect(try await alice.households() == ["home"])

            try await bob.sync()
            #expect(try await bob.households() == ["home"])
            #expect(try await bob.read(type: "inventory", in: .household("home")).map(\.data) == [["name": "Milk", "quantity": 2]])
            try await bob.update(type: "inventory", id: "milk", fields: ["quantity": 1], household: "home")
            try await bob.sync()
            try await alice.sync()
            #expect(try await alice.read(type: "inventory", id: "milk", household: "home")?.data["quantity"] == 1)

            // Bob edits offline while Alice removes him.
            let lateWrite = try await bob.update(type: "inventory", id: "milk", fields: ["quantity": 0], household: "home")
            try await alice.removeMember("bob", from: "home")
            try await alice.sync()
            try await bob.sync()
            #expect(try await bob.households() == [])
            #expect(try await bob.read(in: .household("home")) == [])
            #expect(try await bob.pendingWriteCount() == 0)

            var seen: [SyncEvent] = []
            for await event in bobEvents {
                seen.append(event)
                if case .writeSettled(let outcome) = event, outcome.idempotencyKey == lateWrite.idempotencyKey { break }
            }
            #expect(seen.contains(.householdsChanged(joined: ["home"], left: [])))
            guard case .writeSettled(let rejected) = seen.last else { Issue.record("no outcome for the late write"); return }
            #expect(rejected.rejectionCode == "PERMISSION_DENIED")
            try await alice.sync()
            #expect(try await alice.read(type: "inventory", id: "milk", household: "home")?.data["quantity"] == 1)
        }
    }

    @Test("a change the app's backend made reaches a member's device as changed by the service", arguments: Driver.selected)
    func changesByTheBackend(_ driver: Driver) async throws {
        // Each step says when it is done: under stress-ng one run hung in this test until the
        // suite's time limit, with no report of where (a hung await never lets a test report).
        // Standard error, unbuffered: a run killed at its time limit loses buffered standard output.
        let step = { @Sendable (done: String) in
            FileHandle.standardError.write(Data("changesByTheBackend[\(driver)]: \(done)\n".utf8))
        }
        try await HTTPHarness.with(driver, setup: .live) { http in
            step("harness up")
            let devices = try Devices(http)
            let alice = try devices.make("alice", "alice-phone")
            let bob = try devices.make("bob", "bob-phone")
            try await alice.createHousehold("home", name: "Home")
            try await alice.addMember("bob", to: "home")
            step("household made")
            try await alice.sync()
            step("alice synced")
            try await bob.sync()
            step("bob synced")
            let bobEvents = bob.events()

            // The dashboard adds eggs to the household on Alice's behalf.
            let (key, stored) = ServiceKeySecret.new(name: "dashboard", scopes: [.write])
            #expect(try await http.store.store.createServiceKey(stored))
            let operation = Op.create("inventory", "eggs", ["name": "Eggs", "quantity": 12], household: "home")
            let body = JSONValue.object(["user_id": "alice", "operations": [operation.json]]).serialized()
            let pushed = try await http.send(
                .post, "/v1/service/push?wait=30000", headers: [.authorization: "Bearer \(key)", .contentType: "application/json"], body: body
            )
            #expect(pushed.json?["results"]?[0]?["status"] == "applied", "\(String(describing: pushed.json))")
            step("service push answered \(pushed.status)")

            try await bob.sync()
            step("bob synced again")
            #expect(try await bob.read(type: "inventory", id: "eggs", household: "home")?.data["quantity"] == 12)
            let byService = bobEvents.compactMap { @Sendable event -> [ServiceChange]? in
                if case .changedByService(let changes) = event { changes } else { nil }
            }
            let changes = try await first(of: byService, within: hangGuard, "Bob's device told of the backend's change")
            step("bob's event came")
            #expect(changes == [ServiceChange(key: EntityKey(entityType: "inventory", entityID: "eggs", householdID: "home"), origin: "service:dashboard", deleted: false)])
        }
        step("harness stopped")
    }

    @Test("a purge older than the cursor and an operator's force-resync make devices start over without losing pending writes", arguments: Driver.selected)
    func resync(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, setup: .live) { http in
            let devices = try Devices(http)
            let phone = try devices.make("alice", "phone")
            let tablet = try devices.make("alice", "tablet")
            try await phone.write(type: "recentFoods", id: "soup", data: ["name": "Soup"])
            try await phone.write(type: "recentFoods", id: "rice", data: ["name": "Rice"])
            try await phone.sync()
            try await tablet.sync()
            try await phone.delete(type: "recentFoods", id: "soup")
            try await phone.sync()
            _ = try await http.store.store.purgeTombstones(olderThanMilliseconds: -1)

            // The tablet's cursor is behind the purged tombstone: 409, then a fresh start.
            try await tablet.write(type: "recentFoods", id: "bread", data: ["name": "Bread"])
            let report = try await tablet.sync()
            #expect(report.resynced == .cursorInvalid)
            #expect(report.settled.map(\.key.entityID) == ["bread"])
            #expect(try await tablet.read(type: "recentFoods").map(\.entityID) == ["bread", "rice"])

            try await http.store.store.forceResync(userID: "alice")
            try await phone.write(type: "recentFoods", id: "tea", data: ["name": "Tea"])
            #expect(try await phone.sync().resynced == .forced)
            #expect(try await phone.read(type: "recentFoods").map(\.entityID) == ["bread", "rice", "tea"])
            #expect(try await phone.sync().resynced == nil)
        }
    }

    @Test("live sync follows pokes: another device's write shows up without a sync call, and local writes push themselves", arguments: Driver.selected)
    func liveEvents(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, setup: .live) { http in
            let recorder = Mutex<FaultyTransport?>(nil)
            let baseline = http.waiters
            try await Self.liveRoundTrip(
                try Devices(http),
                listener: { devices in
                    try devices.make("alice", "tablet") { $0.live.safetyInterval = .seconds(600) } transport: { base in
                        let transport = FaultyTransport(base: base, seed: 1, rates: .none)
                        recorder.withLock { $0 = transport }
                        return transport
                    }
                },
                whenListening: { try await http.waitForWaiters(1, beyond: baseline) }
            )
            // Pokes on one event stream did it: no long-poll, no reconnection.
            let requests = try #require(recorder.withLock { $0 }).requests
            #expect(requests["events"] == 1)
            #expect(requests["long-poll"] == nil)
        }
    }

    @Test("live sync by long-poll, and by long-poll as the fallback when event streams fail", arguments: Driver.selected)
    func liveLongPoll(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, setup: .live) { http in
            let devices = try Devices(http)
            try await Self.liveRoundTrip(devices, listener: { try $0.make("alice", "tablet") { $0.live.mode = .longPoll } })
            try await Self.liveRoundTrip(devices, listener: { try $0.make("alice", "tablet-2", transport: NoEventStreamTransport.init) })
        }
    }

    /// Another device writes and syncs; the live listener's observation shows it. Then the
    /// listener writes and, without a sync call, the other device can pull it.
    static func liveRoundTrip(
        _ devices: Devices, listener make: (Devices) throws -> SyncClient, whenListening: () async throws -> Void = {}
    ) async throws {
        let writer = try devices.make("alice", "writer-\(UUID().uuidString.prefix(6))")
        let listener = try make(devices)
        let id = "item-\(UUID().uuidString.prefix(6))"
        listener.startLive()
        try await whenListening()
        let observed = listener.observe(type: "recentFoods")
        try await writer.write(type: "recentFoods", id: id, data: ["name": "Live"])
        try await writer.sync()
        _ = try await first(of: observed.filter { $0.contains { $0.entityID == id && !$0.hasPendingWrites } }, within: hangGuard, "the poke-driven pull")

        let events = listener.events()
        let reply = try #require(try await listener.write(type: "recentFoods", id: id, data: ["name": "Live", "seen": true]).idempotencyKey)
        let settled = events.filter { if case .writeSettled(let outcome) = $0 { outcome.idempotencyKey == reply } else { false } }
        _ = try await first(of: settled, within: hangGuard, "the live push")
        try await writer.sync()
        #expect(try await writer.read(type: "recentFoods", id: id)?.data == ["name": "Live", "seen": true])
        await listener.stopLive()
        await listener.close()
    }

    static func status(_ result: WriteOutcome.Result) -> String {
        switch result {
        case .applied: "applied"
        case .clientWins: "client_wins"
        case .merged: "merged"
        case .serverWins: "server_wins"
        case .duplicate: "duplicate"
        case .rejected(let code, _): code
        }
    }
}
