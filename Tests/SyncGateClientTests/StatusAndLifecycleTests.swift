import Foundation
#if canImport(Observation)
import Observation
#endif
import Synchronization
import SyncGateTestSupport
import Testing

@testable import SyncGateClient

/// Sync status as a value and a stream, and the client's lifecycle: tokens refreshed before they
/// expire, sign-out, and one sync with a deadline.
@Suite("Status and lifecycle", .timeLimit(.minutes(10)))
struct StatusAndLifecycleTests {
    @Test("the status follows a sync: pending writes, uploading, a bootstrap download in changes and bytes, then synced and connected")
    func statusThroughASync() async throws {
        let seen = Mutex<[String: SyncStatus]>([:])
        let clientBox = Mutex<SyncClient?>(nil)
        let (client, _) = try scriptedClient { request in
            let status = clientBox.withLock { $0 }!.status
            seen.withLock { $0[request.route] = status }
            switch request.route {
            case "/v1/sync/push": return ScriptedTransport.json(["job_id": "1", "status": "done", "results": .array(ScriptedTransport.applied(request))])
            default: return ScriptedTransport.page([ScriptedTransport.change("weightLogs", "w0", ["kg": 71])], cursor: "c1")
            }
        }
        clientBox.withLock { $0 = client }
        #expect(client.status == SyncStatus())
        var updates = client.statusUpdates().makeAsyncIterator()
        #expect(await updates.next() == SyncStatus())
        try await client.write(type: "weightLogs", id: "w1", data: ["kg": 70])
        #expect(client.status.pendingWrites == 1)
        #expect(await updates.next()?.pendingWrites == 1)

        try await client.sync()
        let atPush = try #require(seen.withLock { $0["/v1/sync/push"] })
        #expect(atPush.isUploading && !atPush.isDownloading && atPush.connection == .connecting)
        let atPull = try #require(seen.withLock { $0["/v1/sync/pull"] })
        #expect(!atPull.isUploading && atPull.isDownloading && atPull.connection == .connected)
        #expect(atPull.download == DownloadProgress(isBootstrap: true, changes: 0, bytes: 0))
        let after = client.status
        #expect(after.connection == .connected && !after.isUploading && !after.isDownloading && after.download == nil)
        #expect(after.pendingWrites == 0 && after.lastError == nil)
        #expect(try #require(after.lastSyncedAt).timeIntervalSinceNow > -600)
        // A slow reader gets the newest status, not every step.
        #expect(await updates.next() == after)
    }

    @Test("download progress counts each page's changes and bytes while the pull runs")
    func downloadProgress() async throws {
        let progress = Mutex<[DownloadProgress?]>([])
        let clientBox = Mutex<SyncClient?>(nil)
        let (client, _) = try scriptedClient { request in
            progress.withLock { $0.append(clientBox.withLock { $0 }!.status.download) }
            let cursor = request.query("cursor")
            let id = cursor == nil ? "a" : "b"
            return ScriptedTransport.page([ScriptedTransport.change("notes", id, ["t": "x"])], cursor: cursor == nil ? "c1" : "c2", hasMore: cursor == nil)
        }
        clientBox.withLock { $0 = client }
        try await client.sync()
        let seen = progress.withLock { $0 }
        #expect(seen.count == 2)
        #expect(seen[0] == DownloadProgress(isBootstrap: true))
        #expect(seen[1]?.changes == 1 && seen[1]?.isBootstrap == true && (seen[1]?.bytes ?? 0) > 100)
        // The next sync continues from a cursor: not a bootstrap.
        try await client.sync()
        #expect(progress.withLock { $0 }.last??.isBootstrap == false)
    }

    @Test("no answer makes the status offline with the error; the next answer clears it; lastSyncedAt survives a restart")
    func offlineAndBack() async throws {
        let folder = try temporaryFolder("status")
        let down = Atomic<Bool>(true)
        let (client, _) = try scriptedClient(configure: { $0.databasePath = folder + "/device.sqlite" }) { _ in
            if down.load(ordering: .relaxed) { throw URLError(.notConnectedToInternet) }
            return ScriptedTransport.emptyPage()
        }
        await #expect(throws: SyncGateClientError.self) { try await client.sync() }
        #expect(client.status.connection == .offline)
        #expect(client.status.lastError?.code == .transport)
        #expect(client.status.lastSyncedAt == nil)
        down.store(false, ordering: .relaxed)
        try await client.sync()
        #expect(client.status.connection == .connected && client.status.lastError == nil)
        let synced = try #require(client.status.lastSyncedAt)
        await client.close()
        let (reopened, _) = try scriptedClient(configure: { $0.databasePath = folder + "/device.sqlite" }) { _ in ScriptedTransport.emptyPage() }
        #expect(abs(try #require(reopened.status.lastSyncedAt).timeIntervalSince(synced)) < 0.001)
        #expect(reopened.status.connection == .offline)
        // Closing ends status subscriptions.
        let updates = reopened.statusUpdates()
        await reopened.close()
        var count = 0
        for await _ in updates { count += 1 }
        #expect(count <= 1)
    }

    @Test("live sync shows in the status while it runs")
    func liveInStatus() async throws {
        let (client, _) = try scriptedClient(configure: { $0.live.mode = .longPoll; $0.live.longPollWait = .seconds(1) }) { _ in ScriptedTransport.emptyPage() }
        client.startLive()
        #expect(client.status.isLive)
        await client.stopLive()
        #expect(!client.status.isLive)
        await client.close()
    }

    @Test("a long-poll wait of zero still waits a second at the server: no loop of pulls")
    func zeroLongPollWait() async throws {
        let waits = Mutex<[String]>([])
        let (client, _) = try scriptedClient(configure: { $0.live.mode = .longPoll; $0.live.longPollWait = .zero }) { request in
            if request.route == "/v1/sync/pull" { waits.withLock { $0.append(request.path) } }
            return ScriptedTransport.emptyPage()
        }
        client.startLive()
        try await eventually("a long-poll") { waits.withLock { $0.contains { $0.contains("wait=") } } }
        await client.stopLive()
        #expect(waits.withLock { $0.filter { $0.contains("wait=") } }.allSatisfy { $0.contains("wait=1000") }, "\(waits.withLock { $0 })")
    }

    @Test("a live sync started while stopLive waits for the last one stays shown as live")
    func restartDuringStop() async throws {
        let gate = TestGate("the first cycle ends")
        defer { gate.open() }
        let pulls = Atomic<Int>(0)
        let cancelled = Atomic<Bool>(false)
        let (client, _) = try scriptedClient(configure: { $0.live.mode = .longPoll; $0.live.longPollWait = .seconds(1) }) { request in
            if request.route == "/v1/sync/pull", pulls.add(1, ordering: .relaxed).newValue == 1 {
                // The first cycle's pull notes its cancellation and ignores it until the gate opens.
                await withTaskCancellationHandler {
                    await Task { try? await gate.wait() }.value
                } onCancel: {
                    cancelled.store(true, ordering: .relaxed)
                }
            }
            return ScriptedTransport.emptyPage()
        }
        client.startLive()
        try await eventually("the first pull waiting") { pulls.load(ordering: .relaxed) == 1 }
        async let stopped: Void = client.stopLive()
        // stopLive took the first live sync away (then cancelled it): a start begins a second.
        try await eventually("the first live sync cancelled") { cancelled.load(ordering: .relaxed) }
        client.startLive()
        gate.open()
        await stopped
        #expect(client.status.isLive)
        try await eventually("the second live sync pulling") { pulls.load(ordering: .relaxed) >= 2 }
        await client.stopLive()
        #expect(!client.status.isLive)
        await client.close()
    }

    #if canImport(Observation)
    @Test("the Observable model follows the status on the main actor")
    @MainActor
    func observableModel() async throws {
        let (client, _) = try scriptedClient { _ in ScriptedTransport.emptyPage() }
        let model = SyncStatusModel(client: client)
        #expect(model.status.pendingWrites == 0)
        let changed = AsyncStream.makeStream(of: Void.self)
        withObservationTracking { _ = model.status } onChange: { changed.continuation.yield() }
        try await client.write(type: "notes", id: "n1", data: ["t": "x"])
        var iterator = changed.stream.makeAsyncIterator()
        await iterator.next()
        // onChange fires before the value is set: wait for the main actor's turn after it.
        while model.status.pendingWrites != 1 { await Task.yield() }
        #expect(model.status.pendingWrites == 1)
        await client.close()
    }
    #endif

    // MARK: - Tokens

    static func jwt(exp: Double) -> String {
        func part(_ json: String) -> String {
            Data(json.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
        }
        return part(#"{"alg":"HS256","typ":"JWT"}"#) + "." + part(#"{"sub":"alice","exp":\#(exp)}"#) + ".c2ln"
    }

    @Test("a JWT is refreshed before its exp, within the margin; other tokens are kept until refused")
    func tokenRefresh() async throws {
        let now = Mutex(Date(timeIntervalSince1970: 1_000_000))
        let issued = Atomic<Int>(0)
        let cache = TokenCache(
            provider: {
                let count = issued.add(1, ordering: .relaxed).newValue
                return Self.jwt(exp: 1_000_000 + 300 * Double(count))
            },
            refreshMargin: .seconds(60), now: { now.withLock { $0 } }
        )
        let first = try await cache.current()
        #expect(TokenCache.expiry(of: first) == Date(timeIntervalSince1970: 1_000_300))
        now.withLock { $0 += 239 }
        #expect(try await cache.current() == first)
        #expect(issued.load(ordering: .relaxed) == 1)
        now.withLock { $0 += 1 }  // 60 s before exp: time for a fresh one
        let second = try await cache.current()
        #expect(second != first && issued.load(ordering: .relaxed) == 2)
        #expect(try await cache.refresh(replacing: first) == second)
        #expect(try await cache.refresh(replacing: second) != second)
        #expect(issued.load(ordering: .relaxed) == 3)
        // Signed out: nothing is asked for any more.
        cache.forget()
        await #expect(throws: SyncGateClientError.self) { try await cache.current() }
        #expect(issued.load(ordering: .relaxed) == 3)

        let noExp = Self.jwt(exp: 1).split(separator: ".")[0] + "." + Data(#"{"sub":"alice"}"#.utf8).base64EncodedString() + ".c2ln"
        for opaque in ["opaque-token", "a.b", "a.!!!.c", String(noExp)] {
            #expect(TokenCache.expiry(of: opaque) == nil)
        }
        let plain = TokenCache(provider: { "opaque" }, refreshMargin: .seconds(60))
        #expect(try await plain.current() == "opaque")

        // Asked early, a provider that fails leaves the token held in use until its exp.
        let failing = Atomic<Bool>(false)
        let early = TokenCache(
            provider: {
                if failing.load(ordering: .relaxed) { throw URLError(.notConnectedToInternet) }
                return Self.jwt(exp: 1_000_300)
            },
            refreshMargin: .seconds(60), now: { now.withLock { $0 } }
        )
        now.withLock { $0 = Date(timeIntervalSince1970: 1_000_000) }
        let held = try await early.current()
        failing.store(true, ordering: .relaxed)
        now.withLock { $0 = Date(timeIntervalSince1970: 1_000_299) }
        #expect(try await early.current() == held)
        now.withLock { $0 = Date(timeIntervalSince1970: 1_000_300) }
        await #expect(throws: SyncGateClientError.self) { try await early.current() }
    }

    @Test("requests carry a token refreshed ahead of its expiry")
    func clientRefreshesAhead() async throws {
        let issued = Atomic<Int>(0)
        let (client, transport) = try scriptedClient(token: {
            // Each token expires 30 s from now: inside the 60 s margin, so each request asks again.
            let count = issued.add(1, ordering: .relaxed).newValue
            return Self.jwt(exp: Date().timeIntervalSince1970 + 30) + "\(count)"
        }) { _ in ScriptedTransport.emptyPage() }
        try await client.sync()
        try await client.sync()
        #expect(issued.load(ordering: .relaxed) == 2)
        #expect(Set(transport.requests.compactMap { $0.headers["authorization"] }).count == 2)
        // The second was given when asked early and expires as soon: the provider has nothing
        // fresher, so it is used to its exp (or a 401), not asked for at every request.
        try await client.sync()
        #expect(issued.load(ordering: .relaxed) == 2)
    }

    @Test("requests waiting for a token share one ask of the provider")
    func oneAskAtATime() async throws {
        let asked = Atomic<Int>(0)
        let gate = TestGate("the provider")
        let cache = TokenCache(provider: {
            asked.add(1, ordering: .relaxed)
            try await gate.wait()
            return "token"
        }, refreshMargin: .seconds(60))
        let requests = (0..<5).map { _ in Task { try await cache.current() } }
        try await eventually("the provider asked") { asked.load(ordering: .relaxed) == 1 }
        gate.open()
        for request in requests { #expect(try await request.value == "token") }
        #expect(asked.load(ordering: .relaxed) == 1)
    }

    @Test("a request cancelled while the provider is asked cancels the ask (the provider may wait on the user)")
    func aCancelledAskEnds() async throws {
        let asked = Atomic<Int>(0)
        let cache = TokenCache(provider: {
            asked.add(1, ordering: .relaxed)
            try await Task.sleep(for: .seconds(3600))
            return "never"
        }, refreshMargin: .seconds(60))
        let request = Task { try await cache.current() }
        try await eventually("the provider asked") { asked.load(ordering: .relaxed) == 1 }
        request.cancel()
        await #expect(throws: CancellationError.self) { try await request.value }
    }

    @Test("sign-out forgets the token only once the sync running has ended")
    func signOutKeepsTheTokenOfTheSyncRunning() async throws {
        let issued = Atomic<Int>(0)
        let pulled = TestGate("the pull")
        let (client, transport) = try scriptedClient(token: { "token-\(issued.add(1, ordering: .relaxed).newValue)" }) { request in
            if request.method == "DELETE" { return TransportResponse(status: 204) }
            // The first page is held, and has a second: a request after sign-out began.
            guard request.query("cursor") == nil else { return ScriptedTransport.emptyPage(cursor: "c2") }
            try await pulled.wait()
            return ScriptedTransport.page([], cursor: "c1", hasMore: true)
        }
        let sync = Task { try await client.sync() }
        try await eventually("the pull on its way") { transport.requests.contains { $0.route == "/v1/sync/pull" } }
        let signOut = Task { try await client.signOut() }
        try await eventually("sign-out unregistered") { transport.requests.contains { $0.method == "DELETE" } }
        pulled.open()
        // The sync ends as it began, with its user's token, and only then is the client erased.
        #expect(try await sync.value.pulledChanges == 0)
        try await signOut.value
        #expect(issued.load(ordering: .relaxed) == 1)
        #expect(Set(transport.requests.compactMap { $0.headers["authorization"] }) == ["Bearer token-1"])
    }

    @Test("a sync running at sign-out that is refused its token does not ask the provider for another")
    func signOutAsksTheProviderNoMore() async throws {
        let issued = Atomic<Int>(0)
        let pulled = TestGate("the pull")
        let (client, transport) = try scriptedClient(token: { "token-\(issued.add(1, ordering: .relaxed).newValue)" }) { request in
            if request.method == "DELETE" { return TransportResponse(status: 204) }
            // The pull is held until sign-out has begun, then refused: a token asked for now may
            // be the next user's.
            try await pulled.wait()
            return ScriptedTransport.error(401, "UNAUTHENTICATED")
        }
        let sync = Task { try await client.sync() }
        try await eventually("the pull on its way") { transport.requests.contains { $0.route == "/v1/sync/pull" } }
        let signOut = Task { try await client.signOut() }
        try await eventually("sign-out unregistered") { transport.requests.contains { $0.method == "DELETE" } }
        pulled.open()
        let error = await #expect(throws: SyncGateClientError.self) { try await sync.value }
        #expect(error?.code == .closed)
        try await signOut.value
        #expect(issued.load(ordering: .relaxed) == 1)
        #expect(Set(transport.requests.compactMap { $0.headers["authorization"] }) == ["Bearer token-1"])
    }

    @Test("a token the provider gives after sign-out began, though asked before, is not used")
    func aTokenAnsweredAfterTheFreezeIsNotUsed() async throws {
        let asked = TestGate("the provider asked"), answer = TestGate("the provider answers")
        let cache = TokenCache(provider: {
            asked.open()
            try await answer.wait()
            return "the next user's"
        }, refreshMargin: .seconds(60))
        let request = Task { try await cache.current() }
        try await asked.wait()
        cache.freeze()
        answer.open()
        let error = await #expect(throws: SyncGateClientError.self) { try await request.value }
        #expect(error?.code == .closed)
    }

    // MARK: - Sign-out and one sync

    @Test("a client dropped without close() stops its live sync; close() ends observations")
    func droppedAndClosed() async throws {
        let cancelled = Atomic<Bool>(false)
        var pair: (SyncClient, ScriptedTransport)? = try scriptedClient { request in
            guard request.route == "/v1/sync/events" else { return ScriptedTransport.emptyPage() }
            // The event stream's request waits until its task is cancelled.
            do { try await Task.sleep(for: .seconds(3600)) } catch { cancelled.store(true, ordering: .relaxed); throw error }
            return TransportResponse(status: 200)
        }
        let transport = try #require(pair?.1)
        pair?.0.startLive()
        try await eventually("the event stream asked for") { transport.requests.contains { $0.route == "/v1/sync/events" } }
        pair = nil
        try await eventually("the live sync cancelled with its client") { cancelled.load(ordering: .relaxed) }

        let (client, _) = try scriptedClient { _ in ScriptedTransport.emptyPage() }
        try await client.write(type: "notes", id: "n1", data: ["t": "x"])
        var results = client.observe(type: "notes").makeAsyncIterator()
        #expect(try await results.next()?.count == 1)
        await client.close()
        #expect(try await results.next() == nil)
    }

    @Test("sign-out unregisters push, erases the database and closes the client")
    func signOut() async throws {
        let folder = try temporaryFolder("signout")
        let (client, transport) = try scriptedClient(configure: { $0.databasePath = folder + "/device.sqlite"; $0.deviceID = nil }) { request in
            request.method == "DELETE" ? TransportResponse(status: 204) : ScriptedTransport.emptyPage()
        }
        try await client.write(type: "notes", id: "n1", data: ["t": "secret"])
        try await client.signOut()
        #expect(transport.requests.map { "\($0.method) \($0.route)" } == ["DELETE /v1/devices/current/push"])
        await #expect(throws: SyncGateClientError.self) { try await client.sync() }
        await #expect(throws: SyncGateClientError.self) { try await client.read(type: "notes") }
        let bytes = try Data(contentsOf: URL(filePath: folder + "/device.sqlite"))
        #expect(bytes.range(of: Data("secret".utf8)) == nil)
        let (next, _) = try scriptedClient(configure: { $0.databasePath = folder + "/device.sqlite"; $0.deviceID = nil }) { _ in ScriptedTransport.emptyPage() }
        #expect(try await next.read(type: "notes").isEmpty)
        #expect(try await next.pendingWriteCount() == 0)
        #expect(next.deviceID != client.deviceID)
        await next.close()
    }

    @Test("sign-out offline still erases; unregistering can be skipped")
    func signOutOffline() async throws {
        let (client, transport) = try scriptedClient { _ in throw URLError(.notConnectedToInternet) }
        try await client.write(type: "notes", id: "n1", data: ["t": "x"])
        try await client.signOut()
        let (other, quiet) = try scriptedClient { _ in ScriptedTransport.emptyPage() }
        try await other.signOut(unregisteringPush: false)
        #expect(transport.requests.count == 1)
        #expect(quiet.requests.isEmpty)
    }

    @Test("an exchange cancelled while connecting leaves the status offline; after sign-out nothing starts")
    func cancelledWhileConnecting() async throws {
        let (client, _) = try scriptedClient { _ in
            try await Task.sleep(for: .seconds(3600))
            return ScriptedTransport.emptyPage()
        }
        await #expect(throws: SyncGateClientError.self) { try await client.syncOnce(deadline: .now + .milliseconds(100)) }
        #expect(client.status.connection == .offline)
        try await client.signOut(unregisteringPush: false)
        client.startLive()
        #expect(!client.status.isLive)
        await #expect(throws: SyncGateClientError.self) { try await client.signOut() }
    }

    @Test("one sync with a deadline: finished before it, or given up at it with deadlineExceeded")
    func syncOnce() async throws {
        let hold = AsyncStream.makeStream(of: Void.self)
        let (client, transport) = try scriptedClient { request in
            if request.route == "/v1/sync/pull", request.query("cursor") == "c1" {
                // The second sync's pull never answers until cancelled.
                for await _ in hold.stream {}
                try Task.checkCancellation()
            }
            return ScriptedTransport.emptyPage()
        }
        let report = try await client.syncOnce(deadline: .now + .seconds(600))
        #expect(report.pulledChanges == 0)
        let started = ContinuousClock.now
        await #expect(throws: SyncGateClientError.self) { try await client.syncOnce(deadline: .now + .milliseconds(200)) }
        #expect(ContinuousClock.now - started < .seconds(120))
        // The second sync may not have reached its pull by the deadline on a busy machine.
        #expect((1...2).contains(transport.requests.count))
        // The client stays usable.
        hold.continuation.finish()
        #expect(client.status.lastError == nil || client.status.lastError?.code != .deadlineExceeded)
        await client.close()
    }
}
