import SyncGateCore
import SyncGateStorage
import SyncGateTestSupport
import SyncGateWire
import Testing

/// The nudger's storage on both drivers, at explicit times: which devices a feed's advance makes
/// pending, coalescing, leases, live connections and how attempts end.
@Suite(.timeLimit(.minutes(10))) struct NudgeStoreTests {
    static let start = Timestamp(millisecondsSinceEpoch: 1_800_000_000_000)
    static let interval: Int64 = 30_000
    static let phone = DeviceKey(userID: "bob", deviceID: "phone")
    static let tablet = DeviceKey(userID: "alice", deviceID: "tablet")
    static let apns = PushRegistration.apns(token: String(repeating: "ab", count: 32), topic: "com.example.pantry", environment: .sandbox)

    static func at(_ seconds: Int64) -> Timestamp { start.adding(milliseconds: seconds * 1000) }

    /// Alice's household `home` with Bob in it, then both devices registered.
    static func household(_ harness: StoreHarness) async throws {
        _ = try await harness.apply([Op.create("households", "home", ["name": "Home"]), HouseholdTests.member("home", "bob")], user: "alice")
        let driver = harness.store.driver
        try await driver.upsertPushRegistration(phone, .fcm(token: "fcm-bob"), now: at(0))
        try await driver.upsertPushRegistration(tablet, apns, now: at(0))
    }

    static func mark(_ harness: StoreHarness, at seconds: Int64, scopes: [Scope]? = nil) async throws -> NudgePass {
        try await harness.store.driver.markNudges(scopes: scopes, feedLimit: 100, intervalMilliseconds: interval, now: at(seconds))
    }

    static func claim(
        _ harness: StoreHarness, at seconds: Int64, lease: Int64 = 60_000, providers: Set<PushRegistration.Provider> = Set(PushRegistration.Provider.allCases)
    ) async throws -> NudgeClaim {
        try await harness.store.driver.claimNudges(limit: 10, providers: providers, leaseMilliseconds: lease, recheckMilliseconds: 20_000, now: at(seconds))
    }

    @Test(arguments: Driver.selected)
    func aFeedsAdvanceIsPendingForEveryReaderButItsWriter(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            try await Self.household(harness)
            // Registration starts at the feeds' heads: nothing before it is nudged.
            #expect(try await Self.mark(harness, at: 1).devices == 0)
            #expect(try await Self.claim(harness, at: 1).nudges.isEmpty)

            // Alice's tablet writes to the household: Bob's phone is nudged, the tablet is not.
            _ = try await harness.apply([Op.create("inventory", "milk", ["qty": 1], household: "home")], user: "alice", device: "tablet")
            let pass = try await Self.mark(harness, at: 2)
            #expect(pass.feeds == 1 && pass.devices == 1 && !pass.more)
            let claim = try await Self.claim(harness, at: 2)
            #expect(claim.nudges.map(\.device) == [Self.phone] && claim.present == 0)
            #expect(claim.nudges.first?.scopes == [.household("home")] && claim.nudges.first?.registration == .fcm(token: "fcm-bob"))
            #expect(claim.nudges.first?.attempts == 1 && claim.nudges.first?.pendingSince != nil)

            // Another device of Alice's writes: the tablet did not, so it is nudged too.
            _ = try await harness.apply([Op.create("inventory", "eggs", ["qty": 6], household: "home")], user: "alice", device: "laptop")
            #expect(try await Self.mark(harness, at: 3).devices == 2)
            // Bob's phone is leased: only the tablet can be taken.
            #expect(try await Self.claim(harness, at: 3).nudges.map(\.device) == [Self.tablet])
            // Nothing new: a pass finds nothing.
            #expect(try await Self.mark(harness, at: 4) == NudgePass())
            // A service key's change has no writer: everyone reading is nudged.
            _ = try await harness.apply([Op.create("inventory", "salt", ["qty": 1], household: "home")], user: "alice", device: "service:pantry")
            #expect(try await Self.mark(harness, at: 5).devices == 2)
        }
    }

    @Test(arguments: Driver.selected)
    func oneNudgePerIntervalWhateverTheChanges(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            try await Self.household(harness)
            _ = try await harness.apply([Op.create("inventory", "milk", ["qty": 1], household: "home")], user: "alice", device: "tablet")
            _ = try await Self.mark(harness, at: 10)
            let first = try #require(try await Self.claim(harness, at: 10).nudges.first)
            // While it is out, more changes: the pending set grows, its version with it.
            for index in 1...5 {
                _ = try await harness.apply([Op.update("inventory", "milk", base: Int64(index), ["qty": .int(Int64(index + 1))], household: "home")], user: "alice", device: "tablet")
                _ = try await Self.mark(harness, at: 10 + Int64(index))
            }
            try await harness.store.driver.finishNudge(first, outcome: .sent, intervalMilliseconds: Self.interval, now: Self.at(16))
            // Still pending, due a whole interval after the nudge sent: none before. More changes
            // of the same feed meanwhile do not rewrite the row (its feeds are pending already).
            _ = try await harness.apply([Op.create("inventory", "tea", ["qty": 1], household: "home")], user: "alice", device: "tablet")
            #expect(try await Self.mark(harness, at: 20) == NudgePass(feeds: 1, devices: 0))
            #expect(try await Self.claim(harness, at: 45).nudges.isEmpty)
            let second = try #require(try await Self.claim(harness, at: 46).nudges.first)
            #expect(second.device == Self.phone && second.version > first.version)
            try await harness.store.driver.finishNudge(second, outcome: .sent, intervalMilliseconds: Self.interval, now: Self.at(46))
            #expect(try await Self.claim(harness, at: 1000).nudges.isEmpty)
            #expect(try await harness.store.driver.nudgeBacklog().pending == 0)

            // A change soon after a nudge waits out the interval from it.
            _ = try await harness.apply([Op.create("inventory", "eggs", ["qty": 1], household: "home")], user: "alice", device: "tablet")
            _ = try await Self.mark(harness, at: 50)
            #expect(try await Self.claim(harness, at: 75).nudges.isEmpty)
            #expect(try await Self.claim(harness, at: 76).nudges.map(\.device) == [Self.phone])
        }
    }

    @Test(arguments: Driver.selected)
    func aRefusedNudgeWaitsOutTheIntervalAsASentOneDoes(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            try await Self.household(harness)
            _ = try await harness.apply([Op.create("inventory", "milk", ["qty": 1], household: "home")], user: "alice", device: "tablet")
            _ = try await Self.mark(harness, at: 10)
            let refused = try #require(try await Self.claim(harness, at: 10).nudges.first)
            // The provider refuses it for good (a wrong key, say): dropped, never sent.
            try await harness.store.driver.finishNudge(refused, outcome: .dropped(error: "InvalidProviderToken"), intervalMilliseconds: Self.interval, now: Self.at(10))
            // The next change is due an interval after that attempt, not at once: a device the
            // provider refuses is tried once an interval, not at every change.
            _ = try await harness.apply([Op.create("inventory", "eggs", ["qty": 6], household: "home")], user: "alice", device: "tablet")
            _ = try await Self.mark(harness, at: 11)
            #expect(try await Self.claim(harness, at: 39).nudges.isEmpty)
            #expect(try await Self.claim(harness, at: 40).nudges.map(\.device) == [Self.phone])
        }
    }

    @Test(arguments: Driver.selected)
    func aClaimTakesOnlyTheProvidersItNames(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            try await Self.household(harness)
            // A device of Alice's that is neither: Bob's phone (FCM) and her tablet (APNs) are due.
            _ = try await harness.apply([Op.create("inventory", "milk", ["qty": 1], household: "home")], user: "alice", device: "laptop")
            #expect(try await Self.mark(harness, at: 1).devices == 2)
            #expect(try await Self.claim(harness, at: 1, providers: [.apns]).nudges.map(\.device) == [Self.tablet])
            #expect(try await Self.claim(harness, at: 1, providers: [.apns]).nudges.isEmpty)
            #expect(try await Self.claim(harness, at: 1, providers: [.fcm]).nudges.map(\.device) == [Self.phone])
        }
    }

    @Test(arguments: Driver.selected)
    func aNudgerThatDiedLeavesItsNudgeToAnother(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            try await Self.household(harness)
            _ = try await harness.apply([Op.create("inventory", "milk", ["qty": 1], household: "home")], user: "alice", device: "tablet")
            _ = try await Self.mark(harness, at: 1)
            let taken = try await Self.claim(harness, at: 1, lease: 60_000)
            #expect(taken.nudges.count == 1)
            // Its nudger never records it: another takes it once the lease ends, not before.
            #expect(try await Self.claim(harness, at: 60).nudges.isEmpty)
            let again = try #require(try await Self.claim(harness, at: 61).nudges.first)
            #expect(again.device == Self.phone && again.attempts == 2)
            // The first nudger was only slow: what it records now changes nothing, since another
            // holds the nudge; the lease stays the second's.
            let late = try #require(taken.nudges.first)
            try await harness.store.driver.finishNudge(late, outcome: .retry(at: Self.at(62).millisecondsSinceEpoch, error: "late"), intervalMilliseconds: Self.interval, now: Self.at(62))
            try await harness.store.driver.finishNudge(late, outcome: .sent, intervalMilliseconds: Self.interval, now: Self.at(62))
            #expect(try await Self.claim(harness, at: 63).nudges.isEmpty)
            #expect(try await harness.store.driver.nudgeBacklog().pending == 1)
            // A retry is due when it says; the attempts count on.
            try await harness.store.driver.finishNudge(again, outcome: .retry(at: Self.at(90).millisecondsSinceEpoch, error: "503"), intervalMilliseconds: Self.interval, now: Self.at(61))
            #expect(try await Self.claim(harness, at: 89).nudges.isEmpty)
            let third = try #require(try await Self.claim(harness, at: 90).nudges.first)
            #expect(third.attempts == 3)
            try await harness.store.driver.finishNudge(third, outcome: .dropped(error: "gave up"), intervalMilliseconds: Self.interval, now: Self.at(90))
            #expect(try await Self.claim(harness, at: 10_000).nudges.isEmpty)
            #expect(try await harness.queryTexts("SELECT last_error FROM push_registrations WHERE device_id = 'phone'") == ["gave up"])
        }
    }

    @Test(arguments: Driver.selected)
    func aDeviceWithALiveConnectionIsNotNudged(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            try await Self.household(harness)
            let store = harness.store.driver
            // A front's first publish finds no list of its; later ones find it valid.
            #expect(try await store.publishPresence(front: "front-a", added: [Self.phone], removed: [], expiresAt: Self.at(100)) == false)
            #expect(try await store.publishPresence(front: "front-a", added: [], removed: [], expiresAt: Self.at(100)) == true)
            _ = try await harness.apply([Op.create("inventory", "milk", ["qty": 1], household: "home")], user: "alice", device: "tablet")
            _ = try await Self.mark(harness, at: 1)
            // Due while the device is connected: held for a second look, not sent.
            #expect(try await Self.claim(harness, at: 1) == NudgeClaim(held: 1))
            #expect(try await Self.claim(harness, at: 20) == NudgeClaim())
            // Still connected then: dropped, since the connection delivered the change.
            #expect(try await Self.claim(harness, at: 21) == NudgeClaim(present: 1))
            #expect(try await store.nudgeBacklog().pending == 0)

            // Connected when due, gone at the second look (a client that vanished, which its
            // front noticed at its next write): nudged.
            _ = try await harness.apply([Op.create("inventory", "eggs", ["qty": 1], household: "home")], user: "alice", device: "tablet")
            _ = try await Self.mark(harness, at: 30)
            #expect(try await Self.claim(harness, at: 30) == NudgeClaim(held: 1))
            _ = try await store.publishPresence(front: "front-a", added: [], removed: [Self.phone], expiresAt: Self.at(100))
            let sent = try #require(try await Self.claim(harness, at: 50).nudges.first)
            #expect(sent.device == Self.phone && sent.scopes == [.household("home")])
            // Its nudger dies; when the lease ends the device is connected again: held for a
            // second look afresh, not dropped at once for the earlier hold.
            _ = try await store.publishPresence(front: "front-a", added: [Self.phone], removed: [], expiresAt: Self.at(200))
            #expect(try await Self.claim(harness, at: 110) == NudgeClaim(held: 1))
            _ = try await store.publishPresence(front: "front-a", added: [], removed: [Self.phone], expiresAt: Self.at(200))
            let again = try #require(try await Self.claim(harness, at: 130).nudges.first)
            try await store.finishNudge(again, outcome: .sent, intervalMilliseconds: Self.interval, now: Self.at(130))

            // A front that died: its devices count while its heartbeat lasts, then no longer.
            _ = try await store.publishPresence(front: "front-b", added: [Self.phone], removed: [], expiresAt: Self.at(300))
            _ = try await harness.apply([Op.create("inventory", "salt", ["qty": 1], household: "home")], user: "alice", device: "tablet")
            _ = try await Self.mark(harness, at: 280)
            #expect(try await Self.claim(harness, at: 280) == NudgeClaim(held: 1))
            #expect(try await Self.claim(harness, at: 300).nudges.map(\.device) == [Self.phone])
            #expect(try await store.deleteExpiredPresence(now: Self.at(300)) == 1)
            try await store.endPresence(front: "front-a")
            #expect(try await harness.queryTexts("SELECT front FROM push_fronts").isEmpty)
            #expect(try await harness.queryTexts("SELECT device_id FROM push_presence").isEmpty)
        }
    }

    @Test(arguments: Driver.selected)
    func anAddressTheProviderDoesNotKnowIsRemovedUnlessReplaced(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            try await Self.household(harness)
            let store = harness.store.driver
            _ = try await harness.apply([Op.create("inventory", "milk", ["qty": 1], household: "home")], user: "alice", device: "tablet")
            _ = try await Self.mark(harness, at: 1)
            let gone = try #require(try await Self.claim(harness, at: 1).nudges.first)
            // The device registered a new token while the old one was out: the new one stays.
            try await store.upsertPushRegistration(Self.phone, .fcm(token: "fcm-bob-2"), now: Self.at(1))
            try await store.finishNudge(gone, outcome: .unregistered(reason: "UNREGISTERED"), intervalMilliseconds: Self.interval, now: Self.at(2))
            #expect(try await store.pushRegistration(Self.phone)?.registration == .fcm(token: "fcm-bob-2"))
            var stale = gone
            stale.registration = .fcm(token: "fcm-bob-2")
            try await store.finishNudge(stale, outcome: .unregistered(reason: "UNREGISTERED"), intervalMilliseconds: Self.interval, now: Self.at(3))
            #expect(try await store.pushRegistration(Self.phone) == nil)
            #expect(try await store.pushRegistration(Self.tablet) != nil)
        }
    }
}
