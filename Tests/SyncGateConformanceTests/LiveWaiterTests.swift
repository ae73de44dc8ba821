import AsyncHTTPClient
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import NIOHTTP1
import NIOPosix
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import Testing
import SyncGateConcurrency

/// Live connections at scale: waiters sleep in memory, wake only for news, share their reads,
/// and hostile clients are bounded.
@Suite(.timeLimit(.minutes(10))) struct LiveWaiterTests {
    static func configuration(poll: Duration = .milliseconds(200)) -> FrontConfiguration {
        var configuration = HTTPHarness.testConfiguration
        configuration.pollInterval = poll
        configuration.liveLimits = .init(perUser: 100, perProcess: 1000)
        return configuration
    }

    /// An HTTP harness whose front store counts its calls.
    static func withCountingFront(
        _ driver: Driver, setup: TestingSetup = .router, configuration: FrontConfiguration = HTTPHarness.testConfiguration, workers: Int,
        notificationsOnly: Bool = false, _ body: @Sendable (HTTPHarness, CountingFrontStore) async throws -> Void
    ) async throws {
        let counting = Locked<CountingFrontStore?>(nil)
        try await HTTPHarness.with(driver, setup: setup, configuration: configuration, workers: workers, notificationsOnly: notificationsOnly, front: { base in
            let store = CountingFrontStore(base)
            counting.update { $0 = store }
            return store
        }) { http in
            try await body(http, try #require(counting.value))
        }
    }

    /// Idle waiters cost no store call: while 30 long-polls and 3 event streams sleep, the only
    /// calls are the safety net's, one per interval for the whole process.
    @Test(arguments: Driver.selected)
    func idleWaitersMakeNoStoreCalls(_ driver: Driver) async throws {
        try await Self.withCountingFront(driver, setup: .live, configuration: Self.configuration(), workers: 1) { http, store in
            let port = try #require(http.client.port)
            _ = try await http.results([Op.create("households", "home", ["name": "Home"]), HouseholdTests.member("home", "alice")], user: "bob")
            var cursors: [String: String] = [:]
            for user in ["alice", "bob", "carol"] { cursors[user] = try await http.pullAll(user: user).cursor }
            let cursorsNow = cursors
            try await SocketClient.with(port: port) { socket in
            try await withThrowingTaskGroup(of: JSONValue?.self) { group in
                for index in 0..<30 {
                    let user = ["alice", "bob", "carol"][index % 3]
                    let token = try await http.token(user)
                    group.addTask {
                        try await socket.get("/v1/sync/pull?cursor=\(cursorsNow[user]!)&wait=60000", token: token, device: "d\(index)").json
                    }
                }
                var streams: [HTTPClientResponse] = []
                for user in ["alice", "bob", "carol"] {
                    streams.append(try await socket.events(token: try await http.token(user)))
                }
                try await eventually("33 waiters asleep") { http.watcher.armedCount == 33 }

                store.reset()
                let counting = ContinuousClock.now
                try await eventually("five safety-net reads", every: .milliseconds(10)) { store.count("watchState") >= 5 }
                let idle = store.counts
                let intervals = counting.duration(to: .now) / .milliseconds(200)
                #expect(Set(idle.keys).isSubset(of: ["watchState"]), "idle waiters called the store: \(idle)")
                // At most one read per interval, however slow the machine: the net is per
                // process, not per waiter (33 waiters each polling would make 33 times as many).
                #expect(Double(idle["watchState", default: 0]) <= intervals + 1, "\(idle) in \(intervals) intervals")

                // A change in the household wakes its members' long-polls (alice and bob), and only them.
                store.reset()
                _ = try await http.results([Op.create("inventory", "milk", ["qty": 1], household: "home")], user: "bob")
                var answered = 0
                for _ in 0..<20 {
                    let page = try #require(try await group.next() ?? nil)
                    #expect(page["changes"]?[0]?["entity_id"] == "milk")
                    answered += 1
                }
                #expect(answered == 20)
                #expect(store.count("pull") == 0, "woken waiters read only the feed that advanced: \(store.counts)")
                #expect(store.count("readFeeds") <= 2, "20 waiters at one position share their read: \(store.counts)")
                // Carol's long-polls never woke; the streams poked and sleep again.
                try await eventually("carol's 10 long-polls and 3 streams asleep") { http.watcher.armedCount == 13 }
                group.cancelAll()
                _ = streams
            }
            }
        }
    }

    /// The race the watcher exists for: a change commits after a long-poll's read but before it
    /// sleeps. Registered before the read, it wakes on that change's notification (the safety
    /// net is a minute away).
    @Test(arguments: Driver.selected)
    func aChangeCommittedBetweenTheReadAndTheWaitWakesTheWaiter(_ driver: Driver) async throws {
        try await Self.withCountingFront(driver, workers: 1, notificationsOnly: true) { http, store in
            let cursor = try await http.pullAll(device: "tablet").cursor
            store.onceAfterNextPull {
                _ = try await http.results([Op.create("weightLogs", "w1", ["kg": 70])], device: "phone")
                // The watcher has taken the change's notification before the waiter arms.
                let head = try #require(Int64(try await http.store.queryTexts("SELECT CAST(head AS text) FROM feeds WHERE scope = 'u:alice'").first ?? ""))
                try await eventually("the watcher to hear the change") { http.watcher.heads(of: [.user("alice")])[.user("alice"), default: 0] >= head }
            }
            let started = ContinuousClock.now
            let page = try await http.pull(device: "tablet", query: "cursor=\(cursor)&wait=30000")
            #expect(started.duration(to: .now) < NotificationTests.promptly)
            #expect(page.json?["changes"]?[0]?["entity_id"] == "w1")
        }
    }

    /// A long-poll that answered with nothing new leaves its waiter armed; the device's re-poll
    /// with the cursor it was given takes it over and waits without reading. A change committed
    /// between the answer and the re-poll is still answered at once (the safety net is a minute away).
    @Test(arguments: Driver.selected)
    func anIdleRePollWaitsWithoutReading(_ driver: Driver) async throws {
        try await Self.withCountingFront(driver, workers: 1, notificationsOnly: true) { http, store in
            var cursor = try await http.pullAll(device: "tablet").cursor
            store.reset()
            for poll in 0..<3 {
                let page = try await http.pull(device: "tablet", query: "cursor=\(cursor)&wait=300")
                #expect(page.json?["changes"] == [], "poll \(poll)")
                cursor = try #require(page.json?["cursor"]?.stringValue)
                #expect(http.watcher.lingeringCount == 1)
            }
            #expect(store.count("pull") == 1, "only the first poll read: \(store.counts)")
            #expect(Set(store.counts.keys).isSubset(of: ["pull", "watchState"]), "\(store.counts)")

            // Another device's poll with the same cursor does not take it over: it reads.
            _ = try await http.pull(device: "phone", query: "cursor=\(cursor)&wait=100")
            #expect(store.count("pull") == 2)

            _ = try await http.results([Op.create("weightLogs", "w1", ["kg": 70])], device: "phone")
            let started = ContinuousClock.now
            let page = try await http.pull(device: "tablet", query: "cursor=\(cursor)&wait=30000")
            #expect(started.duration(to: .now) < NotificationTests.promptly)
            #expect(page.json?["changes"]?[0]?["entity_id"] == "w1")
        }
    }

    /// A long-poll that answered changes leaves its waiter armed at the cursor it answered: the
    /// device's next poll, with that cursor, waits without reading, and still wakes for the next
    /// change at once (the safety net is a minute away).
    @Test(arguments: Driver.selected)
    func aPollAfterOneThatBroughtChangesWaitsWithoutReading(_ driver: Driver) async throws {
        try await Self.withCountingFront(driver, setup: .live, workers: 1, notificationsOnly: true) { http, store in
            let port = try #require(http.client.port)
            let cursor = try await http.pullAll(device: "tablet").cursor
            try await SocketClient.with(port: port) { socket in
                let token = try await http.token()
                async let woken = socket.get("/v1/sync/pull?cursor=\(cursor)&wait=30000", token: token, device: "tablet")
                try await eventually("the long-poll asleep") { http.watcher.armedCount == 1 }
                _ = try await http.results([Op.create("weightLogs", "w1", ["kg": 70])], device: "phone")
                let page = try await woken
                #expect(page.json?["changes"]?[0]?["entity_id"] == "w1")
                let next = try #require(page.json?["cursor"]?.stringValue)
                #expect(http.watcher.lingeringCount == 1)

                store.reset()
                let quiet = try await socket.get("/v1/sync/pull?cursor=\(next)&wait=300", token: token, device: "tablet")
                #expect(quiet.status == 200 && quiet.json?["changes"] == [] && quiet.json?["has_more"] == false)
                #expect(quiet.json?["cursor"]?.stringValue == next)
                #expect(store.counts.isEmpty || Set(store.counts.keys) == ["watchState"], "the poll read the store: \(store.counts)")

                async let second = socket.get("/v1/sync/pull?cursor=\(next)&wait=30000", token: token, device: "tablet")
                try await eventually("the next long-poll asleep") { http.watcher.armedCount == 1 }
                _ = try await http.results([Op.create("weightLogs", "w2", ["kg": 71])], device: "phone")
                let started = ContinuousClock.now
                let secondPage = try await second
                #expect(started.duration(to: .now) < NotificationTests.promptly)
                #expect(secondPage.json?["changes"]?[0]?["entity_id"] == "w2")
            }
        }
    }

    /// A push is answered from its job's notification, which carries the results: the push's only
    /// store call is its enqueue. Results too large for a NOTIFY (PostgreSQL) cost one read.
    @Test(arguments: Driver.selected)
    func aPushIsAnsweredWithoutReadingItsJobBack(_ driver: Driver) async throws {
        try await Self.withCountingFront(driver, workers: 1, notificationsOnly: true) { http, store in
            // The feed watcher's safety net reads `watchState` at start-up and after the listener
            // connects, whenever its service gets there: not the push's call, so not counted.
            var pushCalls: [String: Int] { store.counts.filter { $0.key != "watchState" } }
            store.reset()
            let pushed = try await http.push([Op.create("weightLogs", "w1", ["kg": 70])], wait: 30_000)
            #expect(pushed.status == 200 && pushed.json?["status"] == "done")
            #expect(pushed.json?["results"]?[0]?["status"] == "applied")
            #expect(pushCalls == ["enqueue": 1], "\(store.counts)")

            store.reset()
            let many = (0..<80).map { Op.create("weightLogs", "long-\(String(repeating: "x", count: 100))-\($0)", ["kg": 70], key: "k\($0)") }
            let large = try await http.push(many, wait: 30_000)
            #expect(large.status == 200 && large.json?["results"]?.arrayValue?.count == 80)
            #expect(pushCalls == (driver == .postgres ? ["enqueue": 1, "job": 1] : ["enqueue": 1]), "\(store.counts)")
        }
    }

    /// A long-poll whose first page came from a read replica that had not replayed the user's
    /// removal from a household, on a front that never heard of the removal (the user waited
    /// nowhere here then): a change to that household wakes it, and it must plan again with the
    /// primary's memberships instead of reading the household's feed on. (No safety net: the
    /// watcher never learns the user's scopes version on its own.)
    @Test(arguments: Driver.selected)
    func aWaiterWokenAfterAStaleReplicaPageReadsNoRemovedHousehold(_ driver: Driver) async throws {
        try await Self.withCountingFront(driver, setup: .live, configuration: Self.configuration(poll: HTTPHarness.noSafetyNet), workers: 1) { http, store in
            _ = try await http.results([Op.create("households", "home", ["name": "Home"]), HouseholdTests.member("home", "bob")], user: "alice")
            let cursor = try await http.pullAll(user: "bob").cursor
            // The replica's answer to bob's next pull, as it was before the removal.
            let stale = try await store.base.pull(
                PullQuery(userID: "bob", deviceID: "d1", cursor: try SyncCursor.decode(cursor, expectedUserID: "bob"), limit: 500)
            )
            #expect(stale.changes.isEmpty)
            _ = try await http.results([Op.delete("household_members", "home:bob", base: 1, household: "home")], user: "alice")
            store.answerNextPullAsAReplicaBehind(with: stale)

            let answered = Locked(false)
            let poll = Task {
                defer { answered.update { $0 = true } }
                return try await http.pull(user: "bob", query: "cursor=\(cursor)&wait=30000")
            }
            defer { poll.cancel() }
            // Asleep, or answered at once (the watcher heard of the removal after bob registered).
            try await eventually("bob's long-poll asleep or answered") { http.watcher.armedCount == 1 || answered.value }
            _ = try await http.results([Op.create("inventory", "after-removal", ["qty": 1], household: "home")], user: "alice")
            let answer = try await poll.value
            #expect(answer.status == 200)
            let ids = (answer.json?["changes"]?.arrayValue ?? []).compactMap { $0["entity_id"]?.stringValue }
            #expect(!ids.contains("after-removal"), "a removed member read \(ids)")
            #expect(answer.json?["scopes"]?["removed"] == ["home"], "\(String(describing: answer.json))")
        }
    }

    /// A push whose finishing notification was lost reads its job as soon as the front learns
    /// notifications may have been lost (the listener reconnected: a resynchronize), not a poll
    /// interval later.
    @Test(arguments: Driver.selected)
    func aPushReadsItsJobWhenNotificationsMayHaveBeenLost(_ driver: Driver) async throws {
        let deaf = Locked<CountingFrontStore?>(nil)
        try await HTTPHarness.with(driver, setup: .router, configuration: Self.configuration(poll: HTTPHarness.noSafetyNet), workers: 1, front: { base in
            let store = CountingFrontStore(base, deaf: true)
            deaf.update { $0 = store }
            return store
        }) { http in
            let store = try #require(deaf.value)
            let started = ContinuousClock.now
            // Resynchronizations keep coming (whenever the job finishes, one follows within
            // 300 ms): each must make the push read. Without them nothing reads the job before
            // the push's 30 s wait ends (the poll interval is longer than the test): a 202.
            let resyncs = Task {
                for _ in 0..<150 where !Task.isCancelled {
                    try await Task.sleep(for: .milliseconds(300))
                    store.notifier.publish(.resynchronize)
                }
            }
            defer { resyncs.cancel() }
            let answer = try await http.push([Op.create("weightLogs", "w1", ["kg": 70])], wait: 30_000)
            #expect(answer.status == 200 && answer.json?["status"] == "done", "answered \(started.duration(to: .now)) after the push")
        }
    }

    /// Every notification lost (the front hears none): the safety net's one read per interval
    /// still wakes a long-poll and an event stream. (Nothing else would: the long-poll would
    /// answer an empty page when its wait ends, the stream would never be poked.)
    @Test(arguments: Driver.selected)
    func lostNotificationsAreCaughtByTheSafetyNet(_ driver: Driver) async throws {
        let interval = Duration.milliseconds(500)
        try await HTTPHarness.with(driver, setup: .live, configuration: Self.configuration(poll: interval), workers: 1, front: { CountingFrontStore($0, deaf: true) }) { http in
            let port = try #require(http.client.port)
            let cursor = try await http.pullAll(device: "tablet").cursor
            try await SocketClient.with(port: port) { socket in
                var events = LiveTests.EventStream(iterator: try await socket.events(token: try await http.token("alice")).body.makeAsyncIterator())
                #expect(try await events.nextEvent(timeout: hangGuard)?.hasPrefix(": connected") == true)
                let token = try await http.token()
                async let waiting = socket.get("/v1/sync/pull?cursor=\(cursor)&wait=30000", token: token, device: "tablet")
                try await eventually("2 waiters asleep") { http.watcher.armedCount == 2 }
                _ = try await http.results([Op.create("weightLogs", "w1", ["kg": 70])], device: "phone")
                let committed = ContinuousClock.now
                let page = try await waiting
                #expect(page.json?["changes"]?[0]?["entity_id"] == "w1", "a long-poll answered \(committed.duration(to: .now)) after the commit")
                let poke = try await LiveTests.nextPoke(&events, timeout: hangGuard)
                #expect(poke == ["household_ids": [], "user": true])
            }
        }
    }

    /// Over a cap on live connections (per user, per process) a long-poll or an event stream is
    /// refused with 429 RATE_LIMITED and Retry-After; plain pulls are not live and not capped.
    @Test(arguments: Driver.selected)
    func liveConnectionsOverACapAnswer429(_ driver: Driver) async throws {
        var configuration = Self.configuration()
        configuration.liveLimits = .init(perUser: 2, perProcess: 3)
        try await HTTPHarness.with(driver, setup: .live, configuration: configuration, workers: 0) { http in
            let port = try #require(http.client.port)
            try await SocketClient.with(port: port) { socket in
                let alice = try await http.token("alice")
                let stream = try await socket.events(token: alice)
                #expect(stream.status.code == 200)
                // The admitted long-polls wait the longest a pull may: they must still be open when
                // the last refusal is asked for. Changes to alice's and bob's feeds end them after.
                async let first = socket.get("/v1/sync/pull?wait=60000", token: alice, device: "phone")
                try await eventually("2 live connections") { http.watcher.waiterCount == 2 }

                let third = try await socket.get("/v1/sync/pull?wait=5000", token: alice, device: "laptop")
                #expect(third.status == 429 && third.json?.errorCode == "RATE_LIMITED")
                #expect(third.json?["error"]?["retryable"] == true)
                #expect(third.headers["retry-after"] == "2")
                let refusedStream = try await socket.events(token: alice, device: "laptop")
                #expect(refusedStream.status.code == 429)
                #expect(refusedStream.headers.first(name: "retry-after") == "2")

                async let bobs = socket.get("/v1/sync/pull?wait=60000", token: try await http.token("bob"))
                try await eventually("3 live connections") { http.watcher.waiterCount == 3 }
                let carol = try await http.token("carol")
                let refused = try await socket.get("/v1/sync/pull?wait=5000", token: carol)
                #expect(refused.status == 429 && refused.json?.errorCode == "RATE_LIMITED", "the process is full")
                let plain = try await socket.get("/v1/sync/pull", token: carol)
                #expect(plain.status == 200, "a pull that does not wait is not a live connection")

                _ = try await http.store.apply([Op.create("weightLogs", "w", ["kg": 1])])
                _ = try await http.store.apply([Op.create("weightLogs", "w", ["kg": 1])], user: "bob")
                #expect(try await first.json?["changes"]?[0]?["entity_id"] == "w")
                #expect(try await bobs.json?["changes"]?[0]?["entity_id"] == "w")
                _ = stream
            }
        }
    }

    /// A client that trickles its request is cut off: a body must arrive whole within the read
    /// timeout, a head within the idle timeout. A long-poll longer than both is not cut. Nothing
    /// but those timeouts closes a connection that keeps sending: any cut during a trickle as
    /// long as the hang guard is theirs, however late a loaded machine runs the timer.
    @Test(arguments: Driver.selected)
    func aSlowClientIsCutOffByTheReadTimeout(_ driver: Driver) async throws {
        var configuration = Self.configuration()
        configuration.requestReadTimeout = .seconds(1)
        configuration.idleTimeout = .seconds(2)
        try await HTTPHarness.with(driver, setup: .live, configuration: configuration, workers: 0) { http in
            let port = try #require(http.client.port)
            let token = try await http.token()

            // A body of 1,000 bytes, one byte every 100 ms (it would take 100 s).
            let opened = ContinuousClock.now
            let body = try await RawConnection.open(
                port: port,
                sending: "POST /v1/sync/push HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\nX-Device-Id: d1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
            )
            let bodyCut = await body.trickle(every: .milliseconds(100), for: hangGuard)
            #expect(bodyCut, "the connection outlived a trickle of \(opened.duration(to: .now)) (read timeout 1 s)")

            // A request head that never ends.
            let started = ContinuousClock.now
            let head = try await RawConnection.open(port: port, sending: "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            // Alone the cut comes at ~2 s; without an idle timeout it never comes.
            let headCut = await head.trickle(every: .milliseconds(100), for: hangGuard)
            #expect(headCut, "the connection outlived a trickle of \(started.duration(to: .now)) (idle timeout 2 s)")
            try? await head.channel.closeFuture.get()

            // A long-poll that waits 3 s (longer than both timeouts) is answered, not cut.
            let waited = try await SocketClient.with(port: port) { socket in try await socket.get("/v1/sync/pull?wait=3000", token: token) }
            #expect(waited.status == 200)
        }
    }

    /// An event stream ends when its token expires (the client reconnects with a fresh one), and
    /// after the maximum lifetime; until then keep-alives continue. Each run gives the other limit
    /// more time than the test, so the end that comes is the one under test.
    @Test(arguments: Driver.selected)
    func anEventStreamEndsWhenItsTokenExpires(_ driver: Driver) async throws {
        var configuration = Self.configuration()
        configuration.keepAliveInterval = .milliseconds(300)
        configuration.maximumStreamLifetime = .seconds(3600)
        try await HTTPHarness.with(driver, setup: .live, configuration: configuration, workers: 0) { http in
            let port = try #require(http.client.port)
            // On a loaded machine opening the stream (its first read of the feeds) has taken longer
            // than the token lived (11 s under stress-ng): a stream opened with less than a few
            // keep-alive intervals of its token left proves nothing, and is tried again with a
            // token that lives twice as long.
            var ttl = 10
            while true {
                let opened = ContinuousClock.now
                let (_, stream) = try await LiveTests.openEvents(port: port, token: try await http.authority.issue(userID: "alice", ttlSeconds: ttl))
                let openedIn = opened.duration(to: .now)
                let events = try await Self.readToEnd(stream, within: hangGuard)
                let lasted = opened.duration(to: .now)
                try await eventually("the stream unregistered") { http.watcher.waiterCount == 0 }
                if openedIn > .seconds(ttl - 3), ttl < 160 {
                    ttl *= 2
                    continue
                }
                #expect(events.ended, "the stream outlived its token")
                // `exp` is whole seconds, so the token ends ttl-1 to ttl seconds after it was issued.
                #expect(lasted > .seconds(Double(ttl) - 1.1), "ended after \(lasted), before its token (valid \(ttl) s) expired")
                #expect(events.keepAlives >= 1, "no keep-alive in \(lasted), the stream open after \(openedIn)")
                break
            }
        }
        configuration.maximumStreamLifetime = .seconds(1)
        try await HTTPHarness.with(driver, setup: .live, configuration: configuration, workers: 0) { http in
            let port = try #require(http.client.port)
            let opened = ContinuousClock.now
            let (_, stream) = try await LiveTests.openEvents(port: port, token: try await http.token(ttl: 3600))
            let events = try await Self.readToEnd(stream, within: hangGuard)
            #expect(events.ended, "the stream outlived its lifetime of 1 s: open \(opened.duration(to: .now)) after the request")
        }
    }

    /// Reads a stream until it ends or `timeout` passes; counts keep-alive comments.
    static func readToEnd(_ stream: LiveTests.EventStream, within timeout: Duration) async throws -> (ended: Bool, keepAlives: Int) {
        var stream = stream
        let deadline = ContinuousClock.now + timeout
        var keepAlives = 0
        while ContinuousClock.now < deadline {
            let remaining = ContinuousClock.now.duration(to: deadline)
            let event = try await stream.nextEvent(timeout: remaining)
            guard let event else {
                // nil: the stream ended, or time ran out.
                return (ContinuousClock.now < deadline, keepAlives)
            }
            if event == ": keep-alive" { keepAlives += 1 }
        }
        return (false, keepAlives)
    }

    /// A woken waiter reads no further than the heads it was woken for: a change committed while
    /// its read waited may follow the member's removal, which the waiter has not seen yet.
    @Test(arguments: Driver.selected)
    func aWokenWaitersReadStopsAtTheHeadsItWasWokenFor(_ driver: Driver) async throws {
        try await Self.withCountingFront(driver, configuration: Self.configuration(), workers: 1) { http, store in
            _ = try await http.results([Op.create("households", "home", ["name": "Home"]), HouseholdTests.member("home", "bob")], user: "owner")
            let cursor = try await http.pullAll(user: "bob").cursor
            let poll = Task { try await http.pull(user: "bob", query: "cursor=\(cursor)&wait=30000").json }
            try await eventually("bob asleep") { http.watcher.armedCount == 1 }
            let gate = TestGate("bob's read")
            store.holdNextFeedRead(until: gate)
            store.reset()
            _ = try await http.results([Op.create("inventory", "milk", ["qty": 1], household: "home")], user: "owner")
            try await eventually("bob's read on its way") { store.feedReads.count == 1 }
            // While it waits: bob is removed, and the owner writes what bob must not see.
            let removal = try await http.results(
                [Op.delete("household_members", "home:bob", base: 1, household: "home"), Op.create("inventory", "secret", ["qty": 1], household: "home")],
                user: "owner"
            )
            #expect(removal.map { $0["status"] } == ["applied", "applied"])
            gate.open()
            let page = try #require(try await poll.value)
            #expect(page["changes"]?.arrayValue?.map { $0["entity_id"] } == ["milk"], "\(page)")
        }
    }

    /// One change to a household wakes all its 100 connected members; their pulls share one read.
    @Test(arguments: Driver.selected)
    func aHouseholdChangeWakesEveryMemberWithSharedReads(_ driver: Driver) async throws {
        try await Self.withCountingFront(driver, configuration: Self.configuration(), workers: 1) { http, store in
            let members = (0..<100).map { "m\($0)" }
            _ = try await http.results([Op.create("households", "home", ["name": "Home"])] + members.map { HouseholdTests.member("home", $0) }, user: "owner")
            var cursors: [String: String] = [:]
            for member in members { cursors[member] = try await http.pullAll(user: member).cursor }
            let cursorsNow = cursors
            try await withThrowingTaskGroup(of: JSONValue?.self) { group in
                for member in members {
                    group.addTask { try await http.pull(user: member, query: "cursor=\(cursorsNow[member]!)&wait=30000").json }
                }
                try await eventually("100 members asleep") { http.watcher.armedCount == 100 }
                store.reset()
                _ = try await http.results([Op.create("inventory", "milk", ["qty": 1], household: "home")], user: "owner")
                var woken = 0
                for try await page in group {
                    #expect(page?["changes"]?.arrayValue?.count == 1 && page?["changes"]?[0]?["entity_id"] == "milk")
                    woken += 1
                }
                #expect(woken == 100)
            }
            #expect(store.count("pull") == 0 && store.count("readFeeds") <= 2, "\(store.counts)")
        }
    }
}

/// A raw TCP connection to the server under test: bytes exactly as written, and whether the
/// server closed it.
final class RawConnection: Sendable {
    let channel: any Channel
    /// When the channel saw the connection close (on its event loop, whatever the test task's
    /// own scheduling on a loaded machine).
    let closedAt = Locked<ContinuousClock.Instant?>(nil)

    init(channel: any Channel) {
        self.channel = channel
        let closedAt = self.closedAt
        channel.closeFuture.whenComplete { _ in closedAt.update { $0 = .now } }
    }

    /// Connects and writes `first` at once, on the event loop: a test task that a loaded machine
    /// runs a second late must not leave the connection silent past the server's read timeout
    /// (the server closed such a connection before its first byte: "I/O on closed channel").
    static func open(port: Int, sending first: String) async throws -> RawConnection {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port)
            .flatMap { channel in channel.writeAndFlush(ByteBuffer(string: first)).map { channel } }
            .get()
        return RawConnection(channel: channel)
    }

    func send(_ text: String) async throws {
        try await channel.writeAndFlush(ByteBuffer(string: text)).get()
    }

    /// Sends one byte every `interval` for up to `duration`; `true` once the server closed the
    /// connection, `false` if it was still open at the end (then it is closed here).
    func trickle(every interval: Duration, for duration: Duration) async -> Bool {
        let deadline = ContinuousClock.now + duration
        while ContinuousClock.now < deadline {
            guard channel.isActive, (try? await send("x")) != nil else { return true }
            try? await Task.sleep(for: interval)
        }
        let closed = !channel.isActive
        try? await channel.close()
        return closed
    }
}
