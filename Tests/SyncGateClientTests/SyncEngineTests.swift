import Foundation
import Synchronization
import SyncGateTestSupport
import Testing

@testable import SyncGateClient

/// The sync cycle against scripted answers: every branch of the protocol a server can take.
@Suite("Sync cycle", .timeLimit(.minutes(10)))
struct SyncEngineTests {
    @Test("a push answered 202 is followed at /v1/jobs/{id}?wait= until done, then settled")
    func followsJobs() async throws {
        let polls = Atomic<Int>(0)
        let pushed = Mutex<TransportRequest?>(nil)
        let (client, transport) = try scriptedClient { request in
            switch request.route {
            case "/v1/sync/push":
                pushed.withLock { $0 = request }
                return ScriptedTransport.json(["job_id": "5", "status": "queued", "status_url": "/v1/jobs/5"], status: 202)
            case "/v1/jobs/5":
                if polls.add(1, ordering: .relaxed).newValue < 3 { return ScriptedTransport.json(["job_id": "5", "status": "running"]) }
                return ScriptedTransport.json(["job_id": "5", "status": "done", "results": .array(ScriptedTransport.applied(pushed.withLock { $0! }))])
            default:
                return ScriptedTransport.emptyPage()
            }
        }
        let write = try await client.write(type: "weightLogs", id: "w1", data: ["kg": 70])
        let report = try await client.sync()
        #expect(report.settled == [WriteOutcome(idempotencyKey: write.idempotencyKey!, key: .weight, result: .applied(version: 1))])
        #expect(report.pending == 0)
        #expect(transport.requests.map(\.route) == ["/v1/sync/push", "/v1/jobs/5", "/v1/jobs/5", "/v1/jobs/5", "/v1/sync/pull"])
        // `jobFollowWait` is 10 ms here: a follow-up waits at least a second at the server.
        #expect(transport.requests[1].query("wait") == "1000")
        #expect(transport.requests.allSatisfy { $0.headers["authorization"] == "Bearer token" && $0.headers["x-device-id"] == "phone" })
    }

    @Test("a confirmed write stays in view through a pull read before its job finished there (a lagging standby)")
    func laggingPull() async throws {
        let caughtUp = Atomic<Bool>(false)
        let (client, _) = try scriptedClient { request in
            switch request.route {
            case "/v1/sync/push":
                return ScriptedTransport.json(["job_id": "7", "status": "done", "results": .array(ScriptedTransport.applied(request))])
            default:
                guard caughtUp.load(ordering: .relaxed) else { return ScriptedTransport.page([], cursor: "c1", watermark: 6) }
                return ScriptedTransport.page([ScriptedTransport.change("weightLogs", "w1", ["kg": 70])], cursor: "c2", watermark: 7)
            }
        }
        try await client.write(type: "weightLogs", id: "w1", data: ["kg": 70])
        _ = try await client.sync()
        #expect(try await client.read(type: "weightLogs").map(\.data) == [["kg": 70]])
        caughtUp.store(true, ordering: .relaxed)
        _ = try await client.sync()
        #expect(try await client.read(type: "weightLogs").map(\.data) == [["kg": 70]])
        #expect(try await client.sync().pending == 0)
    }

    @Test("a job still unfinished after the follow-up time is followed first on the next sync, never pushed twice meanwhile")
    func unfinishedJob() async throws {
        let done = Atomic<Bool>(false)
        let pushed = Mutex<TransportRequest?>(nil)
        let (client, transport) = try scriptedClient(configure: { $0.jobFollowLimit = .zero }) { request in
            switch request.route {
            case "/v1/sync/push":
                pushed.withLock { $0 = request }
                return ScriptedTransport.json(["job_id": "8", "status": "queued"], status: 202)
            case "/v1/jobs/8":
                guard done.load(ordering: .relaxed) else { return ScriptedTransport.json(["job_id": "8", "status": "retrying"]) }
                return ScriptedTransport.json(["job_id": "8", "status": "done", "results": .array(ScriptedTransport.applied(pushed.withLock { $0! }))])
            default:
                return ScriptedTransport.emptyPage()
            }
        }
        try await client.write(type: "weightLogs", id: "w1", data: ["kg": 70])
        #expect(try await client.sync().pending == 1)
        try await client.write(type: "weightLogs", id: "w2", data: ["kg": 71])
        #expect(try await client.sync().pending == 2)
        done.store(true, ordering: .relaxed)
        let report = try await client.sync()
        #expect(report.settled.map(\.key.entityID) == ["w1", "w2"])
        let pushes = transport.requests.filter { $0.route == "/v1/sync/push" }
        #expect(pushes.count == 2)
        #expect(ScriptedTransport.operations(pushes[1]).map { $0["entity_id"] } == ["w2"])
    }

    @Test("a background sync stops following a slow job at its share of the deadline, and still pulls")
    func backgroundSyncPullsPastASlowJob() async throws {
        let polls = Atomic<Int>(0)
        let pushed = Mutex<TransportRequest?>(nil)
        let (client, transport) = try scriptedClient(configure: { $0.jobFollowLimit = .seconds(3600) }) { request in
            switch request.route {
            case "/v1/sync/push":
                pushed.withLock { $0 = request }
                return ScriptedTransport.json(["job_id": "9", "status": "queued"], status: 202)
            case "/v1/jobs/9":
                // Done only after many polls: a sync that follows past its share settles it.
                if polls.add(1, ordering: .relaxed).newValue < 50 { return ScriptedTransport.json(["job_id": "9", "status": "running"]) }
                return ScriptedTransport.json(["job_id": "9", "status": "done", "results": .array(ScriptedTransport.applied(pushed.withLock { $0! }))])
            default:
                return ScriptedTransport.emptyPage()
            }
        }
        try await client.write(type: "weightLogs", id: "w1", data: ["kg": 70])
        let report = try await client.engine.sync(followUntil: .now)
        #expect(report.settled.isEmpty)
        #expect(report.pending == 1)
        #expect(transport.requests.map(\.route) == ["/v1/sync/push", "/v1/jobs/9", "/v1/sync/pull"])
        #expect(transport.requests[0].query("wait") == "0")
        #expect(transport.requests[1].query("wait") == "0")
    }

    @Test("syncOnce(deadline:) follows jobs for half the time left")
    func followingEndsHalfwayToTheDeadline() {
        let now = ContinuousClock.now
        #expect(SyncClient.followUntil(now: now, deadline: now + .seconds(20)) == now + .seconds(10))
        #expect(SyncClient.followUntil(now: now, deadline: now) == now)
        #expect(SyncClient.followUntil(now: now, deadline: now - .seconds(1)) == now)
    }

    @Test("a job the server no longer knows (404) is pushed again with the same keys")
    func forgottenJob() async throws {
        let pushes = Mutex<[TransportRequest]>([])
        let (client, _) = try scriptedClient(configure: { $0.jobFollowLimit = .zero }) { request in
            switch request.route {
            case "/v1/sync/push":
                let count = pushes.withLock { $0.append(request); return $0.count }
                if count == 1 { return ScriptedTransport.json(["job_id": "3", "status": "queued"], status: 202) }
                return ScriptedTransport.json(["job_id": "4", "status": "done", "results": .array(ScriptedTransport.applied(request))])
            case "/v1/jobs/3":
                return ScriptedTransport.error(404, "NOT_FOUND")
            default:
                return ScriptedTransport.emptyPage()
            }
        }
        try await client.write(type: "weightLogs", id: "w1", data: ["kg": 70])
        let report = try await client.sync()
        #expect(report.settled.count == 1)
        let keys = pushes.withLock { $0.map { ScriptedTransport.operations($0).map { $0["idempotency_key"] } } }
        #expect(keys.count == 2)
        #expect(keys[0] == keys[1])
    }

    @Test("a batch refused as a whole (400) is halved until the write it cannot take is alone; that one is rejected, the rest pushed")
    func splitsBatches() async throws {
        let (client, transport) = try scriptedClient { request in
            switch request.route {
            case "/v1/sync/push":
                let operations = ScriptedTransport.operations(request)
                if operations.contains(where: { $0["entity_id"] == "bad" }) { return ScriptedTransport.error(400, "VALIDATION_ERROR") }
                return ScriptedTransport.json(["job_id": "1", "status": "done", "results": .array(ScriptedTransport.applied(request))])
            default:
                return ScriptedTransport.emptyPage()
            }
        }
        for id in ["a", "b", "bad", "c", "d"] {
            try await client.write(type: "weightLogs", id: id, data: ["kg": 1])
        }
        let events = client.events()
        let report = try await client.sync()
        #expect(report.pending == 0)
        #expect(report.settled.map(\.key.entityID).sorted() == ["a", "b", "bad", "c", "d"])
        #expect(report.settled.first { $0.key.entityID == "bad" }?.result == .rejected(code: "VALIDATION_ERROR", message: "scripted"))
        #expect(try await client.pendingWriteCount() == 0)
        let pushedIDs = transport.requests.filter { $0.route == "/v1/sync/push" }.map { ScriptedTransport.operations($0).compactMap { $0["entity_id"]?.stringValue } }
        #expect(pushedIDs.first == ["a", "b", "bad", "c", "d"])
        var iterator = events.makeAsyncIterator()
        var rejected: [String] = []
        for _ in 0..<5 {
            if case .writeSettled(let outcome) = await iterator.next(), let code = outcome.rejectionCode { rejected.append("\(outcome.key.entityID):\(code)") }
        }
        #expect(rejected == ["bad:VALIDATION_ERROR"])
    }

    @Test("a write that kills every job it is in is left alone at the head: the writes ahead of it are applied, it and those behind it wait")
    func splitsDeadJobs() async throws {
        let (client, transport) = try scriptedClient { request in
            guard request.route == "/v1/sync/push" else { return ScriptedTransport.emptyPage() }
            let operations = ScriptedTransport.operations(request)
            guard operations.contains(where: { $0["entity_id"] == "bad" }) else {
                return ScriptedTransport.json(["job_id": "1", "status": "done", "results": .array(ScriptedTransport.applied(request))])
            }
            // The server's answer for a dead job: every operation INTERNAL, retryable.
            let dead = operations.map { operation -> JSONValue in
                ["idempotency_key": operation["idempotency_key"]!, "entity_type": "weightLogs", "entity_id": operation["entity_id"]!, "status": "rejected", "error_code": "INTERNAL", "error_message": "job died", "retryable": true]
            }
            return ScriptedTransport.json(["job_id": "2", "status": "dead", "results": .array(dead)])
        }
        for id in ["a", "b", "bad", "c", "d"] {
            try await client.write(type: "weightLogs", id: id, data: ["kg": 1])
        }
        let report = try await client.sync()
        #expect(report.settled.map(\.key.entityID).sorted() == ["a", "b"])
        #expect(report.pending == 3)
        let pushed = { transport.requests.filter { $0.route == "/v1/sync/push" }.map { ScriptedTransport.operations($0).compactMap { $0["entity_id"]?.stringValue } } }
        #expect(pushed() == [["a", "b", "bad", "c", "d"], ["a", "b"], ["bad", "c"], ["bad"]])
        // The next sync pushes the three again, then the bad write alone, and stops there.
        #expect(try await client.sync().pending == 3)
        #expect(pushed().dropFirst(4) == [["bad", "c", "d"], ["bad"]])
    }

    @Test("a 400 that is not SyncGate's (a proxy's page) fails the sync and refuses no write")
    func aForeign400RefusesNothing() async throws {
        let (client, transport) = try scriptedClient { request in
            guard request.route == "/v1/sync/push" else { return ScriptedTransport.emptyPage() }
            return TransportResponse(status: 400, headers: ["content-type": "text/html"], body: Array("<html>Request Header Or Cookie Too Large</html>".utf8))
        }
        for id in ["a", "b", "c"] {
            try await client.write(type: "weightLogs", id: id, data: ["kg": 1])
        }
        do {
            _ = try await client.sync()
            Issue.record("expected the sync to fail")
        } catch let error as SyncGateClientError {
            #expect(error.httpStatus == 400)
        }
        #expect(try await client.pendingWriteCount() == 3)
        #expect(transport.requests.filter { $0.route == "/v1/sync/push" }.count == 1)
    }

    @Test("a refused token is refreshed once; refused again, sync fails as unauthenticated")
    func tokens() async throws {
        let issued = Atomic<Int>(0)
        let accepted = Mutex<Set<String>>(["t2"])
        let (client, _) = try scriptedClient(token: { "t\(issued.add(1, ordering: .relaxed).newValue)" }) { request in
            let token = request.headers["authorization"]?.replacingOccurrences(of: "Bearer ", with: "") ?? ""
            guard accepted.withLock({ $0.contains(token) }) else { return ScriptedTransport.error(401, "UNAUTHENTICATED") }
            return ScriptedTransport.emptyPage()
        }
        _ = try await client.sync()
        #expect(issued.load(ordering: .relaxed) == 2)
        _ = try await client.sync()
        #expect(issued.load(ordering: .relaxed) == 2, "a working token is kept")
        accepted.withLock { $0 = [] }
        await #expect(throws: SyncGateClientError.self) { try await client.sync() }
        #expect(issued.load(ordering: .relaxed) == 3)
        do {
            _ = try await client.sync()
        } catch let error as SyncGateClientError {
            #expect(error.code == .unauthenticated)
            #expect(!error.isRetryable)
        }
    }

    @Test("pulls page with the cursor until has_more is false, and keep the cursor for next time")
    func paging() async throws {
        let (client, transport) = try scriptedClient { request in
            let cursor = request.query("cursor")
            let next = (cursor.flatMap(Int.init) ?? 0) + 1
            let change: JSONValue = ["entity_type": "weightLogs", "entity_id": .string("w\(next)"), "operation": "upsert", "data": ["kg": .int(Int64(next))], "version": 1, "household_id": nil]
            return ScriptedTransport.json(["changes": next <= 3 ? [change] : [], "cursor": .string("\(next)"), "has_more": .bool(next < 3), "force_resync": false, "scopes": ["added": [], "removed": []]])
        }
        let report = try await client.sync()
        #expect(report.pulledChanges == 3)
        #expect(transport.requests.map { $0.query("cursor") } == [nil, "1", "2"])
        #expect(try await client.read(type: "weightLogs").map(\.entityID) == ["w1", "w2", "w3"])
        _ = try await client.sync()
        #expect(transport.requests.last?.query("cursor") == "3")
    }

    @Test("CURSOR_INVALID and force_resync start over from the beginning, keeping pending writes", arguments: [ResyncReason.cursorInvalid, .forced])
    func resync(reason: ResyncReason) async throws {
        let refused = Atomic<Bool>(false)
        let (client, transport) = try scriptedClient { request in
            switch request.route {
            case "/v1/sync/push":
                return ScriptedTransport.error(503, "UNAVAILABLE", retryAfter: "2")
            default:
                if request.query("cursor") == "old", !refused.exchange(true, ordering: .relaxed) {
                    if reason == .cursorInvalid { return ScriptedTransport.error(409, "CURSOR_INVALID") }
                    return ScriptedTransport.json(["changes": [], "cursor": "old", "has_more": false, "force_resync": true, "scopes": ["added": [], "removed": []]])
                }
                if request.query("cursor") == nil {
                    let change: JSONValue = ["entity_type": "weightLogs", "entity_id": "kept", "operation": "upsert", "data": ["kg": 1], "version": 1, "household_id": nil]
                    return ScriptedTransport.json(["changes": [change], "cursor": "old", "has_more": false, "force_resync": false, "scopes": ["added": [], "removed": []]])
                }
                return ScriptedTransport.emptyPage(cursor: "old")
            }
        }
        // A first pull leaves the cursor "old" and one record ("kept"); the server will refuse that cursor.
        _ = try await client.engine.store.apply(PullPage(changes: [PulledChange(key: EntityKey(entityType: "weightLogs", entityID: "gone"), data: ["kg": 9], version: 4)], envelope: .init(cursor: "old")), epoch: 0)
        try await client.write(type: "weightLogs", id: "mine", data: ["kg": 2])
        let events = client.events()
        // Pushing fails (503) but the cycle's pull is what this test is about: pull directly.
        var report = SyncReport()
        try await client.engine.pull(into: &report)
        #expect(report.resynced == reason)
        #expect(transport.requests.map { $0.query("cursor") } == ["old", nil])
        #expect(try await client.read(type: "weightLogs").map(\.entityID) == ["kept", "mine"])
        #expect(try await client.pendingWriteCount() == 1)
        var iterator = events.makeAsyncIterator()
        #expect(await iterator.next() == .resynced(reason))
    }

    @Test("a server that asks to start over every time makes the sync fail instead of looping")
    func resyncLoop() async throws {
        let (client, _) = try scriptedClient { _ in ScriptedTransport.error(409, "CURSOR_INVALID") }
        do {
            _ = try await client.sync()
            Issue.record("expected an error")
        } catch let error as SyncGateClientError {
            #expect(error.code == .resyncLoop)
        }
    }

    @Test("retryable failures keep the writes, sent, and push them again with the same keys")
    func retryable() async throws {
        let attempt = Atomic<Int>(0)
        let keys = Mutex<[[JSONValue?]]>([])
        let (client, _) = try scriptedClient { request in
            guard request.route == "/v1/sync/push" else { return ScriptedTransport.emptyPage() }
            keys.withLock { $0.append(ScriptedTransport.operations(request).map { $0["idempotency_key"] }) }
            switch attempt.add(1, ordering: .relaxed).newValue {
            case 1: throw URLErrorLike()
            case 2: return ScriptedTransport.error(429, "RATE_LIMITED", retryAfter: "2")
            case 3:
                let dead = ScriptedTransport.operations(request).map { operation -> JSONValue in
                    ["idempotency_key": operation["idempotency_key"]!, "entity_type": "weightLogs", "entity_id": operation["entity_id"]!, "status": "rejected", "error_code": "INTERNAL", "error_message": "job died", "retryable": true]
                }
                return ScriptedTransport.json(["job_id": "2", "status": "dead", "results": .array(dead)])
            default:
                return ScriptedTransport.json(["job_id": "3", "status": "done", "results": .array(ScriptedTransport.applied(request))])
            }
        }
        try await client.write(type: "weightLogs", id: "w1", data: ["kg": 70])
        do {
            _ = try await client.sync()
            Issue.record("expected a transport error")
        } catch let error as SyncGateClientError {
            #expect(error.code == .transport)
            #expect(error.isRetryable)
        }
        do {
            _ = try await client.sync()
            Issue.record("expected 429")
        } catch let error as SyncGateClientError {
            #expect(error.httpStatus == 429)
            #expect(error.retryAfter == .seconds(2))
        }
        #expect(try await client.sync().pending == 1)
        #expect(try await client.sync().settled.map(\.result) == [.applied(version: 1)])
        let sent = keys.withLock { $0 }
        #expect(sent.count == 4)
        #expect(Set(sent.map { $0 }).count == 1, "every attempt carries the same key")
    }

    @Test("waits and sizes outside the protocol's ranges are clamped, so a bad setting cannot make every push a 400")
    func clamps() async throws {
        let (client, transport) = try scriptedClient(configure: {
            $0.pushWait = .seconds(90)
            $0.pullPageSize = 5000
            $0.batchOperations = 0
        }) { request in
            guard request.route == "/v1/sync/push" else { return ScriptedTransport.emptyPage() }
            return ScriptedTransport.json(["job_id": "1", "status": "done", "results": .array(ScriptedTransport.applied(request))])
        }
        try await client.write(type: "weightLogs", id: "w1", data: ["kg": 70])
        try await client.write(type: "weightLogs", id: "w2", data: ["kg": 71])
        try await client.sync()
        let pushes = transport.requests.filter { $0.route == "/v1/sync/push" }
        #expect(pushes.map { $0.query("wait") } == ["30000", "30000"])
        #expect(pushes.map { ScriptedTransport.operations($0).count } == [1, 1])
        #expect(transport.requests.first { $0.route == "/v1/sync/pull" }?.query("limit") == "1000")
    }

    @Test("live sync reports a failure and waits at least the server's Retry-After before trying again")
    func liveBackoff() async throws {
        let pulls = Mutex<[ContinuousClock.Instant]>([])
        let (client, _) = try scriptedClient(configure: {
            $0.live.mode = .longPoll
            $0.backoff = Backoff(initial: .milliseconds(10), maximum: .milliseconds(50))
        }) { request in
            pulls.withLock { $0.append(.now) }
            return ScriptedTransport.error(503, "UNAVAILABLE", retryAfter: "1")
        }
        let events = client.events()
        client.startLive()
        let failure = try await first(of: events.compactMap { event -> Duration? in
            if case .liveSyncFailed(let error, let retryIn) = event, error.serverCode == "UNAVAILABLE" { return retryIn }
            return nil
        }, within: hangGuard, "a live sync failure")
        #expect(failure >= .seconds(1))
        try await eventually("a second attempt", every: .milliseconds(20)) { pulls.withLock { $0.count } >= 2 }
        await client.stopLive()
        let times = pulls.withLock { $0 }
        #expect(times[1] - times[0] >= .seconds(1))
    }

    @Test("a CancellationError that is not the live task's own (a token provider's) is a failure to retry, not the end of live sync")
    func strayCancellation() async throws {
        let refusals = Atomic<Int>(0)
        let pushes = Atomic<Int>(0)
        let (client, _) = try scriptedClient(
            token: {
                if refusals.add(1, ordering: .relaxed).oldValue == 0 { throw CancellationError() }
                return "token"
            },
            configure: {
                $0.live.mode = .longPoll
                $0.backoff = Backoff(initial: .milliseconds(10), maximum: .milliseconds(50))
            }
        ) { request in
            switch request.route {
            case "/v1/sync/push":
                pushes.add(1, ordering: .relaxed)
                return ScriptedTransport.json(["job_id": "1", "status": "done", "results": .array(ScriptedTransport.applied(request))])
            default:
                try await Task.sleep(for: .milliseconds(20))
                return ScriptedTransport.emptyPage()
            }
        }
        let events = client.events()
        try await client.write(type: "weightLogs", id: "w1", data: ["kg": 70])
        client.startLive()
        _ = try await first(of: events.compactMap { event -> Bool? in
            if case .liveSyncFailed = event { return true }
            return nil
        }, within: hangGuard, "the provider's CancellationError reported as a failure")
        try await eventually("the write pushed after the failure", every: .milliseconds(20)) { pushes.load(ordering: .relaxed) >= 1 }
        await client.stopLive()
    }

    /// A refusal's `Retry-After` (429 at the live-connection cap), or a stream's own `retry:`
    /// (here after its opening lines and a poke: heard, no failure to back off from).
    static let streamAnswers: [(TransportResponse, Duration)] = [
        (ScriptedTransport.error(429, "RATE_LIMITED", retryAfter: "1"), .seconds(1)),
        (TransportResponse(status: 200, headers: ["content-type": "text/event-stream"], body: Array(": connected\nretry: 300\n\nevent: poke\ndata: {}\n\n".utf8)), .milliseconds(300)),
    ]

    @Test("an event stream is not asked for again sooner than its refusal's Retry-After or its retry: says", arguments: streamAnswers)
    func eventStreamRetryAfter(answer: TransportResponse, least: Duration) async throws {
        let streams = Mutex<[ContinuousClock.Instant]>([])
        let (client, _) = try scriptedClient(configure: {
            // The backoff alone says at most 50 ms.
            $0.backoff = Backoff(initial: .milliseconds(10), maximum: .milliseconds(50))
        }) { request in
            switch request.route {
            case "/v1/sync/events":
                streams.withLock { $0.append(.now) }
                return answer
            default:
                // The long-poll that stands in while the stream is down.
                try await Task.sleep(for: .milliseconds(50))
                return ScriptedTransport.emptyPage()
            }
        }
        client.startLive()
        try await eventually("a second attempt at the stream", every: .milliseconds(20)) { streams.withLock { $0.count } >= 2 }
        await client.stopLive()
        let times = streams.withLock { $0 }
        #expect(times[1] - times[0] >= least)
    }

    @Test(
        "an event stream that ends without a byte, or only its opening comment, or a page that is not one, is a failure: asked for again after a growing delay",
        arguments: [("text/event-stream", ""), ("text/event-stream", ": connected\n\n"), ("text/html", "<html>Sign in to the Wi-Fi</html>")]
    )
    func emptyEventStreamsBackOff(contentType: String, page: String) async throws {
        let streams = Mutex<[ContinuousClock.Instant]>([])
        let (client, _) = try scriptedClient(configure: {
            $0.backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(10), jitter: 0)
        }) { request in
            switch request.route {
            case "/v1/sync/events":
                // 200, and the body ends at once (a proxy that does not stream), or a portal's page.
                streams.withLock { $0.append(.now) }
                return TransportResponse(status: 200, headers: ["content-type": contentType], body: Array(page.utf8))
            default:
                try await Task.sleep(for: .milliseconds(50))
                return ScriptedTransport.emptyPage()
            }
        }
        client.startLive()
        try await eventually("a fourth attempt at the stream", every: .milliseconds(20)) { streams.withLock { $0.count } >= 4 }
        await client.stopLive()
        let times = streams.withLock { $0 }
        // 100, 200, 400 ms: the third failure waits at least 400 ms.
        #expect(times[3] - times[2] >= .milliseconds(400), "\(zip(times, times.dropFirst()).map { $1 - $0 })")
    }

    @Test("a push refused by the server or a proxy still lets the cycle pull; the sync throws the push's error")
    func aRefusedPushStillPulls() async throws {
        let pulls = Atomic<Int>(0)
        let (client, _) = try scriptedClient { request in
            switch request.route {
            case "/v1/sync/push":
                return TransportResponse(status: 403, headers: ["content-type": "text/html"], body: Array("<html>Forbidden by policy</html>".utf8))
            case "/v1/sync/pull":
                pulls.add(1, ordering: .relaxed)
                return ScriptedTransport.page([[
                    "entity_type": "weightLogs", "entity_id": "theirs", "version": 1, "operation": "upsert", "data": ["kg": 80],
                    "household_id": nil, "updated_at": "2026-01-15T10:00:00.000Z",
                ]], cursor: "c1")
            default:
                return ScriptedTransport.emptyPage()
            }
        }
        try await client.write(type: "weightLogs", id: "mine", data: ["kg": 70])
        let error = await #expect(throws: SyncGateClientError.self) { try await client.sync() }
        #expect(error?.httpStatus == 403)
        #expect(pulls.load(ordering: .relaxed) == 1)
        #expect(try await client.read(type: "weightLogs").map(\.data).count == 2, "the pulled entity is stored beside the pending write")
    }

    @Test("a household joined in this pull is history on all its pages, not the service's news")
    func joinedHouseholdHistoryIsNotNews() async throws {
        @Sendable func change(_ id: String, household: String?) -> JSONValue {
            [
                "entity_type": "inventory", "entity_id": .string(id), "version": 1, "operation": "upsert", "data": ["qty": 1],
                "household_id": household.map(JSONValue.string) ?? .null, "updated_at": "2026-01-15T10:00:00.000Z", "origin": "service:pantry",
            ]
        }
        let pulls = Atomic<Int>(0)
        let (client, _) = try scriptedClient { request in
            guard request.route == "/v1/sync/pull" else { return ScriptedTransport.emptyPage() }
            switch pulls.add(1, ordering: .relaxed).newValue {
            case 1: return ScriptedTransport.emptyPage(cursor: "c1")
            case 2:
                // Joined since c1: the household's history begins, and goes on on the next page.
                return ScriptedTransport.json([
                    "changes": [change("milk", household: "home")], "cursor": "c2", "has_more": true, "force_resync": false,
                    "scopes": ["added": ["home"], "removed": []], "device_watermark": "0",
                ])
            default:
                return ScriptedTransport.page([change("eggs", household: "home"), change("news", household: nil)], cursor: "c3")
            }
        }
        _ = try await client.sync()
        let events = client.events()
        _ = try await client.sync()
        for await event in events {
            guard case .changedByService(let changes) = event else { continue }
            #expect(changes.map(\.key.entityID) == ["news"])
            break
        }
    }

    @Test("derived types cannot be written; a patch of a missing entity is an error; closed clients refuse")
    func localErrors() async throws {
        let (client, _) = try scriptedClient(configure: { $0.readOnlyTypes = ["dailySummaries"] }) { _ in ScriptedTransport.emptyPage() }
        await #expect(throws: SyncGateClientError.self) { try await client.write(type: "dailySummaries", id: "2026-01-15", data: [:]) }
        await #expect(throws: SyncGateClientError.self) { try await client.update(type: "weightLogs", id: "none", fields: ["kg": 1]) }
        // JSON has no NaN or infinity (as `null` the field would be removed): refused, nothing written.
        for bad: JSONValue in [.double(.nan), .double(.infinity), ["nested": [1, .double(-.infinity)]]] {
            let error = await #expect(throws: SyncGateClientError.self) { try await client.write(type: "weightLogs", id: "w1", data: ["kg": bad]) }
            #expect(error?.code == .invalidArgument)
        }
        try await client.write(type: "weightLogs", id: "w1", data: ["kg": 70])
        await #expect(throws: SyncGateClientError.self) { try await client.update(type: "weightLogs", id: "w1", fields: ["kg": .double(.nan)]) }
        #expect(try await client.read(type: "weightLogs").map(\.data) == [["kg": 70]])
        #expect(try await client.delete(type: "weightLogs", id: "none").idempotencyKey == nil)
        await client.close()
        await #expect(throws: SyncGateClientError.self) { try await client.sync() }
    }
}

/// A connection failure, as a transport reports one.
struct URLErrorLike: Error {}
