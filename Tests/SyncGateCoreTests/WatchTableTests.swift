import SyncGateCore
import SyncGateWire
import Testing

/// The live waiters' table: whom a head, a scopes version or a resync wakes, with no I/O.
@Suite struct WatchTableTests {
    static let alice = DeviceKey(userID: "alice", deviceID: "phone")
    static let bob = DeviceKey(userID: "bob", deviceID: "tablet")
    static let home = Scope.household("home")
    static let aliceFeed = Scope.user("alice")

    @Test func anArmedWaiterWakesOnlyWhenAHeadPassesItsPosition() throws {
        var table = WatchTable()
        let id = try table.register(device: Self.alice, feeds: [Self.aliceFeed, Self.home])
        #expect(table.arm(id, positions: [Self.aliceFeed: 4, Self.home: 10], scopesVersion: 1) == nil)
        #expect(table.feedAdvanced(Self.home, head: 10).isEmpty, "a head at the position is nothing new")
        #expect(table.feedAdvanced(Self.aliceFeed, head: 3).isEmpty, "a stale head is nothing new")
        #expect(table.feedAdvanced(.household("elsewhere"), head: 99).isEmpty)
        #expect(table.feedAdvanced(Self.home, head: 11) == [id: .init(advanced: [Self.home])])
        // Woken once: it is disarmed until it has read and arms again.
        #expect(table.feedAdvanced(Self.home, head: 12).isEmpty)
        #expect(table.arm(id, positions: [Self.aliceFeed: 4, Self.home: 11], scopesVersion: 1) == .init(advanced: [Self.home]),
                "head 12 was seen while it read up to 11")
        #expect(table.arm(id, positions: [Self.aliceFeed: 4, Self.home: 12], scopesVersion: 1) == nil)
        #expect(table.heads(of: [Self.home, Self.aliceFeed]) == [Self.home: 12, Self.aliceFeed: 3])
    }

    /// The race the table exists for: a change commits after the waiter's read but before it
    /// sleeps. Registration happened before the read, so arming sees the head and wakes at once.
    @Test func aHeadSeenBetweenRegistrationAndArmingWakesAtArming() throws {
        var table = WatchTable()
        let id = try table.register(device: Self.alice, feeds: [Self.home])
        #expect(table.feedAdvanced(Self.home, head: 5).isEmpty, "not armed yet: recorded, nobody to wake")
        #expect(table.scopesChanged(userID: "alice", version: 3).isEmpty)
        let wake = table.arm(id, positions: [Self.home: 4], scopesVersion: 2)
        #expect(wake == .init(advanced: [Self.home], scopesChanged: true))
    }

    /// A feed nobody watches is not remembered: memory follows the waiters.
    @Test func headsAreKeptOnlyWhileWatched() throws {
        var table = WatchTable()
        #expect(table.feedAdvanced(Self.home, head: 5).isEmpty)
        #expect(table.heads(of: [Self.home]).isEmpty)
        let first = try table.register(device: Self.alice, feeds: [Self.home])
        let second = try table.register(device: Self.bob, feeds: [Self.home, .user("bob")])
        _ = table.feedAdvanced(Self.home, head: 6)
        table.remove(first)
        #expect(table.heads(of: [Self.home]) == [Self.home: 6], "still watched by the second")
        table.remove(second)
        #expect(table.watchedFeeds.isEmpty && table.watchedUsers.isEmpty && table.waiterCount == 0)
        #expect(table.heads(of: [Self.home]).isEmpty)
        table.remove(second)
        #expect(table.connections(of: "bob") == 0, "removing twice changes nothing")
    }

    @Test func onlyTheWaitersBehindAreWoken() throws {
        var table = WatchTable()
        var positions: [WatchTable.WaiterID: Int64] = [:]
        for index in 0..<50 {
            let id = try table.register(device: DeviceKey(userID: "u\(index)", deviceID: "d"), feeds: [Self.home])
            positions[id] = Int64(index)
            #expect(table.arm(id, positions: [Self.home: Int64(index)], scopesVersion: 0) == nil)
        }
        let woken = table.feedAdvanced(Self.home, head: 20)
        #expect(Set(woken.keys) == Set(positions.filter { $0.value < 20 }.keys))
        #expect(table.armedCount == 30)
    }

    @Test func scopesChangesWakeTheUsersWaitersOnly() throws {
        var table = WatchTable()
        let phone = try table.register(device: Self.alice, feeds: [Self.aliceFeed])
        let laptop = try table.register(device: DeviceKey(userID: "alice", deviceID: "laptop"), feeds: [Self.aliceFeed])
        let other = try table.register(device: Self.bob, feeds: [.user("bob")])
        for id in [phone, laptop, other] { #expect(table.arm(id, positions: [:], scopesVersion: 2) == nil) }
        #expect(table.scopesChanged(userID: "alice", version: 2).isEmpty, "the version they read")
        let woken = table.scopesChanged(userID: "alice", version: 3)
        #expect(woken == [phone: .init(scopesChanged: true), laptop: .init(scopesChanged: true)])
    }

    /// NFC and NFD "josé" are two users in either database: one's scopes change must not wake the
    /// other, whose arming with its own (lower) version would otherwise wake it at once, every
    /// time; nor do they share a connection cap or a device's watermark.
    @Test func canonicallyEquivalentUsersAreWatchedApart() throws {
        var table = WatchTable(limits: .init(perUser: 1))
        let (nfc, nfd) = ("jos\u{E9}", "jose\u{301}")
        let composed = try table.register(device: DeviceKey(userID: nfc, deviceID: "phone"), feeds: [.user(nfc)])
        let decomposed = try table.register(device: DeviceKey(userID: nfd, deviceID: "phone"), feeds: [.user(nfd)])
        #expect(table.connections(of: nfc) == 1 && table.connections(of: nfd) == 1)
        #expect(table.arm(composed, positions: [:], scopesVersion: 5) == nil)
        #expect(table.arm(decomposed, positions: [:], scopesVersion: 1) == nil)
        #expect(table.scopesChanged(userID: nfc, version: 6) == [composed: .init(scopesChanged: true)])
        #expect(table.arm(decomposed, positions: [:], scopesVersion: 1) == nil, "the other user's version is not this one's")
        #expect(table.scopesVersion(of: nfd) == nil && table.scopesVersion(of: nfc) == 6)
        table.jobFinished(9, device: DeviceKey(userID: nfc, deviceID: "phone"))
        #expect(table.watermark(of: DeviceKey(userID: nfd, deviceID: "phone")) == 0)
        #expect(Set(table.watchedUsers.map { Array($0.utf8) }) == [Array(nfc.utf8), Array(nfd.utf8)])
    }

    /// The safety net's read wakes whoever is behind, whatever notifications were lost; a raised
    /// resync epoch wakes everyone, including waiters that arm after it was seen.
    @Test func theSafetyNetsReadWakesWhoeverIsBehind() throws {
        var table = WatchTable()
        let ahead = try table.register(device: Self.alice, feeds: [Self.home])
        let behind = try table.register(device: Self.bob, feeds: [Self.home, .user("bob")])
        #expect(table.observe(WatchState(resyncEpoch: 0)).isEmpty, "the first read only learns the epoch")
        #expect(table.arm(ahead, positions: [Self.home: 9], scopesVersion: 0) == nil)
        #expect(table.arm(behind, positions: [Self.home: 7, .user("bob"): 0], scopesVersion: 0) == nil)
        let woken = table.observe(WatchState(heads: [Self.home: 9, .user("bob"): 0], scopesVersions: ["alice": 0], resyncEpoch: 0))
        #expect(woken == [behind: .init(advanced: [Self.home])])

        let late = try table.register(device: DeviceKey(userID: "carol", deviceID: "d"), feeds: [.user("carol")])
        let resynced = table.observe(WatchState(resyncEpoch: 1))
        #expect(resynced == [ahead: .init(resynchronize: true)], "the armed waiter; the others are awake")
        #expect(table.arm(late, positions: [.user("carol"): 0], scopesVersion: 0) == .init(resynchronize: true))
        #expect(table.arm(late, positions: [.user("carol"): 0], scopesVersion: 0) == nil, "once")
        #expect(table.arm(behind, positions: [Self.home: 9, .user("bob"): 0], scopesVersion: 0) == .init(resynchronize: true))
    }

    @Test func connectionCapsPerUserAndPerProcess() throws {
        var table = WatchTable(limits: .init(perUser: 2, perProcess: 3))
        let first = try table.register(device: Self.alice, feeds: [])
        _ = try table.register(device: DeviceKey(userID: "alice", deviceID: "laptop"), feeds: [])
        #expect(throws: WatchTable.Refusal.userLimit(2)) { try table.register(device: Self.alice, feeds: []) }
        _ = try table.register(device: Self.bob, feeds: [])
        #expect(throws: WatchTable.Refusal.processLimit(3)) { try table.register(device: DeviceKey(userID: "carol", deviceID: "d"), feeds: []) }
        table.remove(first)
        _ = try table.register(device: Self.alice, feeds: [])
        #expect(table.connections(of: "alice") == 2 && table.waiterCount == 3)
    }

    /// A long-poll that answered with nothing new lingers armed, outside the caps: the next poll
    /// adopts it only if nothing passed it since; stale ones are found for removal.
    @Test func lingeringWaitersAreAdoptedOnlyIfNothingPassedThem() throws {
        var table = WatchTable(limits: .init(perUser: 1, perProcess: 2))
        let start = ContinuousClock.now
        let quiet = try table.register(device: Self.alice, feeds: [Self.home])
        #expect(table.linger(quiet, since: start) == false, "unarmed: nothing to keep")
        #expect(table.arm(quiet, positions: [Self.home: 4], scopesVersion: 1) == nil)
        #expect(table.linger(quiet, since: start) == true)
        #expect(table.waiterCount == 0 && table.connections(of: "alice") == 0 && table.lingeringWaiterCount == 1)
        // Its connection is free: the same user may open another meanwhile.
        let other = try table.register(device: DeviceKey(userID: "alice", deviceID: "laptop"), feeds: [])
        #expect(throws: WatchTable.Refusal.userLimit(1)) { try table.adopt(quiet) }
        table.remove(other)
        #expect(try table.adopt(quiet) == true)
        #expect(table.waiterCount == 1 && table.connections(of: "alice") == 1 && table.lingeringWaiterCount == 0)
        #expect(try table.adopt(quiet) == false, "adopted once")

        // Passed while lingering (a head, a scopes change): no longer adoptable, and stale.
        #expect(table.linger(quiet, since: start) == true)
        #expect(table.feedAdvanced(Self.home, head: 5).keys.contains(quiet))
        #expect(table.staleLingering(before: start) == [quiet])
        #expect(try table.adopt(quiet) == false)
        let joiner = try table.register(device: Self.bob, feeds: [.user("bob")])
        #expect(table.arm(joiner, positions: [.user("bob"): 0], scopesVersion: 1) == nil)
        #expect(table.linger(joiner, since: start) == true)
        _ = table.scopesChanged(userID: "bob", version: 2)
        #expect(try table.adopt(joiner) == false)
        table.remove(quiet)
        table.remove(joiner)
        #expect(table.connections(of: "alice") == 0 && table.connections(of: "bob") == 0 && table.lingeringWaiterCount == 0)

        // Expiry by age; the count of lingering waiters is capped like connections.
        let old = try table.register(device: Self.alice, feeds: [])
        _ = table.arm(old, positions: [:], scopesVersion: 0)
        #expect(table.linger(old, since: start) == true)
        #expect(table.staleLingering(before: start).isEmpty)
        #expect(table.staleLingering(before: start + .seconds(1)) == [old])
        var ids: [WatchTable.WaiterID] = []
        for device in ["a", "b"] {
            let id = try table.register(device: DeviceKey(userID: device, deviceID: "d"), feeds: [])
            _ = table.arm(id, positions: [:], scopesVersion: 0)
            ids.append(id)
        }
        #expect(table.linger(ids[0], since: start) == true)
        #expect(table.linger(ids[1], since: start) == false, "two linger already")
        #expect(table.waiterCount == 1)
    }

    @Test func watermarksOfWatchedDevices() throws {
        var table = WatchTable()
        table.jobFinished(3, device: Self.alice)
        #expect(table.watermark(of: Self.alice) == 0, "not watched: not remembered")
        let id = try table.register(device: Self.alice, feeds: [])
        table.jobFinished(7, device: Self.alice)
        table.jobFinished(5, device: Self.alice)
        table.jobFinished(9, device: DeviceKey(userID: "alice", deviceID: "laptop"))
        #expect(table.watermark(of: Self.alice) == 7)
        table.remove(id)
        #expect(table.watermark(of: Self.alice) == 0)
    }

    @Test func anEventStreamChangesTheFeedsItWatches() throws {
        var table = WatchTable()
        let id = try table.register(device: Self.alice, feeds: [Self.aliceFeed])
        table.watch(id, feeds: [Self.aliceFeed, Self.home])
        #expect(table.arm(id, positions: [Self.aliceFeed: 1, Self.home: 1], scopesVersion: 0) == nil)
        #expect(table.feedAdvanced(Self.home, head: 2) == [id: .init(advanced: [Self.home])])
        table.watch(id, feeds: [Self.aliceFeed])
        #expect(table.watchedFeeds == [Self.aliceFeed])
        #expect(table.arm(id, positions: [Self.aliceFeed: 1, Self.home: 1], scopesVersion: 0) == nil, "positions of unwatched feeds are ignored")
        #expect(table.feedAdvanced(Self.home, head: 3).isEmpty)
    }

    /// Random schedules of registrations, events, arms and removals against a model that knows
    /// every committed head: an armed waiter is woken exactly when a head it watches passes its
    /// position (no lost wake-up, no spurious one).
    @Test(arguments: 0..<40)
    func randomSchedulesLoseNoWakeUp(seed: UInt64) throws {
        var random = SeededGenerator(seed: seed)
        var table = WatchTable(limits: .init(perUser: 1000, perProcess: 1000))
        let scopes = (0..<4).map { Scope.household("h\($0)") }
        var committed: [Scope: Int64] = Dictionary(uniqueKeysWithValues: scopes.map { ($0, 0) })
        // A waiter's positions, as its read (after registration) returned them, and whether it sleeps.
        struct Model { var feeds: Set<Scope>; var positions: [Scope: Int64]; var sleeping: Bool }
        var model: [WatchTable.WaiterID: Model] = [:]
        for _ in 0..<400 {
            switch Int.random(in: 0..<10, using: &random) {
            case 0...2:
                let feeds = Set(scopes.filter { _ in Bool.random(using: &random) })
                let id = try table.register(device: DeviceKey(userID: "u\(Int.random(in: 0..<5, using: &random))", deviceID: "d"), feeds: feeds)
                // It reads now: positions are the committed heads.
                model[id] = Model(feeds: feeds, positions: committed.filter { feeds.contains($0.key) }, sleeping: false)
            case 3...5:
                let scope = scopes.randomElement(using: &random)!
                committed[scope]! += Int64.random(in: 1...3, using: &random)
                // Notifications may arrive late: deliver this head now or a later one only.
                if Bool.random(using: &random) {
                    for (id, wake) in table.feedAdvanced(scope, head: committed[scope]!) {
                        let waiter = try #require(model[id])
                        #expect(waiter.sleeping && wake.advanced == [scope] && waiter.positions[scope]! < committed[scope]!)
                        model[id]?.sleeping = false
                    }
                }
            case 6:
                // The safety net: every head as committed.
                for (id, wake) in table.observe(WatchState(heads: committed)) {
                    let waiter = try #require(model[id])
                    #expect(waiter.sleeping)
                    #expect(wake.advanced == Set(waiter.feeds.filter { committed[$0]! > waiter.positions[$0]! }))
                    model[id]?.sleeping = false
                }
            case 7...8:
                guard let (id, waiter) = model.filter({ !$0.value.sleeping }).randomElement(using: &random) else { continue }
                if let wake = table.arm(id, positions: waiter.positions, scopesVersion: 0) {
                    // Only for heads it has not read, and only ones the table was told of.
                    #expect(wake.advanced.allSatisfy { committed[$0]! > waiter.positions[$0]! })
                    model[id]?.positions = committed.filter { waiter.feeds.contains($0.key) }
                } else {
                    model[id]?.sleeping = true
                }
            default:
                guard let id = model.keys.randomElement(using: &random) else { continue }
                table.remove(id)
                model[id] = nil
            }
        }
        // Once the safety net has read every head, nobody who still sleeps is behind.
        for (id, _) in table.observe(WatchState(heads: committed)) {
            #expect(model[id]?.sleeping == true)
            model[id]?.sleeping = false
        }
        for waiter in model.values where waiter.sleeping {
            #expect(waiter.feeds.allSatisfy { committed[$0]! == waiter.positions[$0]! }, "a sleeping waiter was left behind")
        }
        #expect(table.armedCount == model.values.count(where: \.sleeping))
    }

    /// What the table reports, `+device` appeared and `-device` left, sorted.
    static func changes(_ table: inout WatchTable) -> [String] {
        let taken = table.takePresenceChanges()
        return (taken.appeared.map { "+\($0)" } + taken.left.map { "-\($0)" }).sorted()
    }

    /// Push nudges skip devices with a live connection: the table reports the devices that came
    /// to have a waiter and those whose last waiter went, netted between two reports.
    @Test func presenceChangesAreReportedPerDeviceAndNetted() throws {
        var table = WatchTable()
        var taken: [String]
        let early = try table.register(device: Self.alice, feeds: [])
        // Untracked: nothing is reported.
        taken = Self.changes(&table)
        #expect(taken == [])
        table.trackPresence()
        // Tracking starts with every device that holds a waiter.
        taken = Self.changes(&table)
        #expect(taken == ["+\(Self.alice)"])
        let second = try table.register(device: Self.alice, feeds: [])
        table.remove(early)
        taken = Self.changes(&table)
        #expect(taken == [], "alice kept a waiter throughout")
        table.remove(second)
        taken = Self.changes(&table)
        #expect(taken == ["-\(Self.alice)"])
        // A device that comes and goes between two reports is in neither; one that goes and
        // comes back is in neither too.
        let brief = try table.register(device: Self.bob, feeds: [])
        table.remove(brief)
        taken = Self.changes(&table)
        #expect(taken == [])
        let back = try table.register(device: Self.bob, feeds: [])
        _ = Self.changes(&table)
        table.remove(back)
        _ = try table.register(device: Self.bob, feeds: [])
        taken = Self.changes(&table)
        #expect(taken == [])
        #expect(table.presentDevices == [Self.bob])
    }

    /// A long-poll that answered lingers for its device's next poll: the device stays present.
    @Test func aLingeringLongPollKeepsItsDevicePresent() throws {
        var table = WatchTable()
        var taken: [String]
        table.trackPresence()
        let poll = try table.register(device: Self.alice, feeds: [Self.home])
        #expect(table.arm(poll, positions: [Self.home: 1], scopesVersion: 1) == nil)
        #expect(table.linger(poll, since: .now) == true)
        taken = Self.changes(&table)
        #expect(taken == ["+\(Self.alice)"])
        #expect(table.presentDevices == [Self.alice])
        table.remove(poll)
        taken = Self.changes(&table)
        #expect(taken == ["-\(Self.alice)"])
    }
}
