import Foundation
import HTTPTypes
import HummingbirdTesting
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import SyncGateWorker
import Testing

/// The protocol through the real router, on every driver.
@Suite(.timeLimit(.minutes(10))) struct HTTPTests {
    @Test(arguments: Driver.selected)
    func healthAndReadiness(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 0) { http in
            let health = try await http.send(.get, "/healthz", headers: [:])
            #expect(health.status == 200 && health.json?["status"] == "ok")
            let ready = try await http.send(.get, "/readyz", headers: [:])
            #expect(ready.status == 200 && ready.json?["status"] == "ready")
            #expect(ready.json?["database"] == .string(driver.rawValue))
        }
    }

    @Test(arguments: Driver.selected)
    func pushIsAppliedByAWorkerAndPulledByAnotherDevice(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let pushed = try await http.push([Op.create("weightLogs", "w1", ["kg": 70], key: "k1")], device: "phone", wait: 30_000)
            #expect(pushed.status == 200)
            #expect(pushed.json?["status"] == "done")
            #expect(pushed.json?["job_id"]?.stringValue.flatMap { Int64($0) } != nil)
            let result = try #require(pushed.json?["results"]?.arrayValue?.first)
            #expect(result == ["idempotency_key": "k1", "entity_type": "weightLogs", "entity_id": "w1", "status": "applied", "version": 1])
            #expect(pushed.json?["server_time"]?.stringValue.flatMap(Timestamp.init(rfc3339:)) != nil)

            let pulled = try await http.pullAll(device: "tablet")
            #expect(pulled.changes.count == 1)
            let change = try #require(pulled.changes.first?.objectValue)
            #expect(change["entity_type"] == "weightLogs" && change["entity_id"] == "w1" && change["operation"] == "upsert")
            #expect(change["data"] == ["kg": 70] && change["version"] == 1 && change["household_id"] == .null)
            #expect(change["updated_at"]?.stringValue?.hasSuffix("Z") == true)
            #expect(pulled.last["scopes"] == ["added": [], "removed": []])
            #expect(pulled.last["force_resync"] == false)
            // The phone's job is finished, so its watermark is that job; the tablet pushed nothing.
            #expect(try await http.pullAll(device: "phone").last["device_watermark"] == pushed.json?["job_id"])
            #expect(pulled.last["device_watermark"] == "0")
        }
    }

    @Test(arguments: Driver.selected)
    func aPushNotFinishedInTimeAnswers202WithAStatusURL(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 0) { http in
            let pushed = try await http.push([Op.create("weightLogs", "w1", ["kg": 70])], wait: 0)
            #expect(pushed.status == 202)
            let id = try #require(pushed.json?["job_id"]?.stringValue)
            #expect(pushed.json?["status"] == "queued")
            #expect(pushed.json?["status_url"] == .string("/v1/jobs/\(id)"))
            #expect(pushed.headers[.location] == "/v1/jobs/\(id)")
            #expect(pushed.json?["results"] == nil)

            let status = try await http.send(.get, "/v1/jobs/\(id)", headers: try await http.headers())
            #expect(status.status == 200 && status.json?["status"] == "queued" && status.json?["results"] == nil)
            // Not yours, or not a job at all: 404.
            #expect(try await http.send(.get, "/v1/jobs/\(id)", headers: try await http.headers("bob")).status == 404)
            for bad in ["999999", "0", "-1", "abc", "99999999999999999999999"] {
                let response = try await http.send(.get, "/v1/jobs/\(bad)", headers: try await http.headers())
                #expect(response.status == 404 && response.json?.errorCode == "NOT_FOUND", "\(bad)")
            }
            // A worker picks it up later; waiting on the status URL returns the results.
            try await http.store.drain()
            let done = try await http.send(.get, "/v1/jobs/\(id)?wait=5000", headers: try await http.headers())
            #expect(done.json?["status"] == "done")
            #expect(done.json?["results"]?.arrayValue?.count == 1)
        }
    }

    @Test(arguments: Driver.selected)
    func jobStatusLongPollReturnsAsSoonAsTheJobFinishes(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 0) { http in
            let pushed = try await http.push([Op.create("weightLogs", "w1", ["kg": 70])], wait: 0)
            let id = try #require(pushed.json?["job_id"]?.stringValue)
            let started = ContinuousClock.now
            let baseline = http.waiters
            async let waited = http.send(.get, "/v1/jobs/\(id)?wait=30000", headers: try await http.headers())
            try await http.waitForWaiters(1, beyond: baseline)
            try await http.store.drain()
            let response = try await waited
            #expect(response.json?["status"] == "done")
            // Answered when the job finished (milliseconds), not when its wait ran out.
            #expect(started.duration(to: .now) < .seconds(30))
        }
    }

    @Test(arguments: Driver.selected)
    func authenticationFailuresAre401(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 0) { http in
            let other = await TokenAuthority(secret: "another-secret-another-secret-another")
            let forged = try await other.issue(userID: "alice", ttlSeconds: 3600)
            let expired = try await http.authority.issue(userID: "alice", ttlSeconds: -10)
            let tooLong = try await http.authority.issue(userID: String(repeating: "u", count: 129), ttlSeconds: 3600)
            let valid = try await http.token()
            let unsigned = valid.split(separator: ".").prefix(2).joined(separator: ".") + "."
            let authorizations: [String?] = [nil, "", "Bearer", "Bearer ", "Basic abc", "Bearer not.a.jwt", "Bearer \(forged)", "Bearer \(expired)", "Bearer \(tooLong)", "Bearer \(unsigned)", "Token \(valid)"]
            for authorization in authorizations {
                var headers: HTTPFields = [HTTPField.Name("X-Device-Id")!: "d1"]
                if let authorization { headers[.authorization] = authorization }
                // RFC 6750 3: the challenge; an error code only for a Bearer request: no token
                // in it (invalid_request), or one that is refused (invalid_token).
                let words = (authorization ?? "").split(separator: " ")
                let challenge = switch (words.first?.lowercased(), words.count) {
                case ("bearer", 1): #"Bearer realm="syncgate", error="invalid_request""#
                case ("bearer", _): #"Bearer realm="syncgate", error="invalid_token""#
                default: #"Bearer realm="syncgate""#
                }
                for (method, path) in [(HTTPRequest.Method.get, "/v1/sync/pull"), (.post, "/v1/sync/push"), (.get, "/v1/jobs/1"), (.get, "/v1/sync/events")] {
                    let response = try await http.send(method, path, headers: headers, body: "{}")
                    #expect(response.status == 401, "\(authorization ?? "none") \(path)")
                    #expect(response.json?.errorCode == "UNAUTHENTICATED")
                    #expect(response.json?["error"]?["retryable"] == false)
                    let given = response.headers[.wwwAuthenticate] ?? "none"
                    #expect(given == challenge || given.hasPrefix(challenge + ", error_description="), "\(authorization ?? "none"): \(given)")
                }
            }
            // A lower-case scheme is fine.
            #expect(try await http.send(.get, "/v1/sync/pull", headers: [.authorization: "bearer \(valid)", HTTPField.Name("X-Device-Id")!: "d1"]).status == 200)
        }
    }

    @Test(arguments: Driver.selected)
    func badRequestsAre400WithTheProtocolBodyAndChangeNothing(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 0) { http in
            let valid = #"{"idempotency_key":"k","entity_type":"weightLogs","entity_id":"w","intent":"create","data":{"kg":1}}"#
            let bodies = [
                "", "null", "[]", "{", #"{"operations":"x"}"#, #"{"operations":[]}"#, #"{"operations":[{}]}"#,
                #"{"operations":[{"idempotency_key":"k","entity_type":"t","entity_id":"e","intent":"create"}]}"#,
                #"{"operations":[\#(valid)],"trailing"#, "\u{FEFF}{}",
                // Numbers that would change on the way in (beyond 64 bits, beyond a double's precision).
                #"{"operations":[{"idempotency_key":"k","entity_type":"weightLogs","entity_id":"w","intent":"create","data":{"kg":18446744073709551616}}]}"#,
                #"{"operations":[{"idempotency_key":"k","entity_type":"weightLogs","entity_id":"w","intent":"create","data":{"kg":70.123456789012345678}}]}"#,
            ]
            for body in bodies {
                let response = try await http.send(.post, "/v1/sync/push", headers: try await http.headers(), body: body)
                #expect(response.status == 400, "\(body)")
                #expect(response.json?.errorCode == "VALIDATION_ERROR")
                #expect(response.json?["error"]?["message"]?.stringValue?.isEmpty == false)
            }
            for device in [nil, "", "has space", String(repeating: "x", count: 129)] as [String?] {
                let response = try await http.send(.post, "/v1/sync/push", headers: try await http.headers(device: device), body: #"{"operations":[\#(valid)]}"#)
                #expect(response.status == 400 && response.json?.errorCode == "VALIDATION_ERROR", "\(String(describing: device))")
            }
            for query in ["wait=-1", "wait=30001", "wait=abc", "wait=1&wait=2", "nonsense=1"] {
                let response = try await http.send(.post, "/v1/sync/push?\(query)", headers: try await http.headers(), body: #"{"operations":[\#(valid)]}"#)
                #expect(response.status == 400, "\(query)")
            }
            #expect(try await http.store.store.stats().jobsByState.values.reduce(0, +) == 0)
        }
    }

    @Test(arguments: Driver.selected)
    func oversizeBodiesAre413(_ driver: Driver) async throws {
        var configuration = HTTPHarness.testConfiguration
        configuration.maximumBodyBytes = 1000
        try await HTTPHarness.with(driver, configuration: configuration, workers: 0) { http in
            let big = #"{"operations":[{"idempotency_key":"k","entity_type":"t","entity_id":"e","intent":"create","data":{"x":"\#(String(repeating: "a", count: 2000))"}}]}"#
            let response = try await http.send(.post, "/v1/sync/push", headers: try await http.headers(), body: big)
            #expect(response.status == 413 && response.json?.errorCode == "PAYLOAD_TOO_LARGE")
            #expect(try await http.store.store.stats().queueDepth == 0)
        }
    }

    @Test(arguments: Driver.selected)
    func pullParametersAreValidated(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 0) { http in
            for query in ["limit=0", "limit=1001", "limit=ten", "wait=60001", "wait=-5", "entity_types=", "entity_types=a,,b", "other=1", "limit=1&limit=2"] {
                let response = try await http.pull(query: query)
                #expect(response.status == 400 && response.json?.errorCode == "VALIDATION_ERROR", "\(query)")
            }
            for cursor in ["garbage", "v1.abc.def", "v2.x.y", String(repeating: "v", count: 70_000)] {
                let response = try await http.pull(query: "cursor=\(cursor)")
                #expect(response.status == 409 && response.json?.errorCode == "CURSOR_INVALID")
            }
            let bobs = try await http.pullAll(user: "bob").cursor
            let stolen = try await http.pull(query: "cursor=\(bobs)")
            #expect(stolen.status == 409 && stolen.json?.errorCode == "CURSOR_INVALID")
            #expect(try await http.pull(query: "limit=1000&wait=0&entity_types=weightLogs,foodLogs").status == 200)
        }
    }

    @Test(arguments: Driver.selected)
    func unknownRoutesAre404AndWrongMethods405WithAllow(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 0) { http in
            for (method, path) in [(HTTPRequest.Method.get, "/"), (.get, "/v2/sync/pull"), (.get, "/v1/jobs"), (.get, "/v1/jobs/1/more")] {
                let response = try await http.send(method, path, headers: try await http.headers())
                #expect(response.status == 404 && response.json?.errorCode == "NOT_FOUND", "\(method) \(path)")
                #expect(response.headers[.allow] == nil)
            }
            // A known path asked with another method (RFC 9110 15.5.6): 405 and the methods it takes.
            let wrong: [(HTTPRequest.Method, String, String)] = [
                (.post, "/v1/sync/pull", "GET, HEAD"), (.get, "/v1/sync/push", "POST"), (.delete, "/v1/jobs/1", "GET, HEAD"),
                (.put, "/healthz", "GET, HEAD"),
            ]
            for (method, path, allowed) in wrong {
                for headers in [try await http.headers(), HTTPFields()] {
                    let response = try await http.send(method, path, headers: headers)
                    #expect(response.status == 405 && response.json?.errorCode == "METHOD_NOT_ALLOWED", "\(method) \(path)")
                    #expect(response.json?["error"]?["retryable"] == false)
                    #expect(response.headers[.allow] == allowed, "\(method) \(path)")
                }
            }
        }
    }

    @Test(arguments: Driver.selected)
    func queueLimitsAnswer429And503WithRetryAfter(_ driver: Driver) async throws {
        var configuration = HTTPHarness.testConfiguration
        configuration.queueLimits = QueueLimits(maximumQueuedPerUser: 2, maximumQueuedTotal: 3)
        configuration.retryAfterSeconds = 7
        try await HTTPHarness.with(driver, configuration: configuration, workers: 0) { http in
            for index in 0..<2 {
                #expect(try await http.push([Op.create("weightLogs", "w\(index)", ["kg": 1])], wait: 0).status == 202)
            }
            let limited = try await http.push([Op.create("weightLogs", "w9", ["kg": 1])], wait: 0)
            #expect(limited.status == 429 && limited.json?.errorCode == "RATE_LIMITED")
            #expect(limited.json?["error"]?["retryable"] == true)
            #expect(limited.headers[.retryAfter] == "7")
            #expect(try await http.push([Op.create("weightLogs", "b", ["kg": 1])], user: "bob", wait: 0).status == 202)
            let overloaded = try await http.push([Op.create("weightLogs", "c", ["kg": 1])], user: "carol", wait: 0)
            #expect(overloaded.status == 503 && overloaded.json?.errorCode == "OVERLOADED")
            #expect(overloaded.headers[.retryAfter] == "7")
            #expect(try await http.store.store.stats().queueDepth == 3)
        }
    }

    @Test(arguments: Driver.selected)
    func perOperationErrorsAreResultsNotRequestFailures(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let pushed = try await http.push([
                Op.create("unknownThings", "x", [:]),
                Op.create("timeEntries", "t1", ["project_id": "p1", "minutes": "many"]),
                Op.create("dailySummaries", "2026-01-15", [:]),
                Op.update("weightLogs", "nope", base: 1, ["kg": 1]),
                Op.create("weightLogs", "ok", ["kg": 1]),
            ], wait: 30_000)
            #expect(pushed.status == 200)
            let results = try #require(pushed.json?["results"]?.arrayValue)
            #expect(results.map { $0["status"]?.stringValue ?? "" } == ["rejected", "rejected", "rejected", "rejected", "applied"])
            #expect(results.map { $0["error_code"]?.stringValue ?? "-" } == ["VALIDATION_ERROR", "VALIDATION_ERROR", "PERMISSION_DENIED", "ENTITY_NOT_FOUND", "-"])
            #expect(results[1]["error_message"] == "field 'minutes' must be a number")
            #expect(results[0]["retryable"] == false)
        }
    }

    @Test(arguments: Driver.selected)
    func aWaitingPullWakesOnAnotherDevicesPush(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let cursor = try await http.pullAll(device: "tablet").cursor
            let baseline = http.waiters
            async let waiting = http.pull(device: "tablet", query: "cursor=\(cursor)&wait=60000")
            try await http.waitForWaiters(1, beyond: baseline)
            let pushed = try await http.push([Op.create("weightLogs", "w1", ["kg": 70])], device: "phone", wait: 30_000)
            #expect(pushed.status == 200)
            // Asleep with nothing to read, the long-poll answers with the change only if woken.
            let page = try await waiting
            #expect(page.status == 200)
            #expect(page.json?["changes"]?.arrayValue?.first?["entity_id"] == "w1")
        }
    }

    @Test(arguments: Driver.selected)
    func aWaitingPullWithNothingNewAnswersEmptyAtTheDeadline(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 0) { http in
            let started = ContinuousClock.now
            let page = try await http.pull(query: "wait=700")
            let elapsed = started.duration(to: .now)
            #expect(page.status == 200 && page.json?["changes"] == [])
            #expect(elapsed >= .milliseconds(650) && elapsed < hangGuard, "answered after \(elapsed)")
        }
    }
}

extension HTTPTests {
    /// A job that dies answers, on its push and its status URL alike, `200` with `status: dead`
    /// and every operation `INTERNAL`, `retryable: true`; nothing of it was applied.
    @Test(arguments: Driver.selected)
    func aDeadJobAnswersInternalRetryableThroughHTTP(_ driver: Driver) async throws {
        struct Broken: Error {}
        let hooks = WorkerHooks(beforeApply: { job in if job.userID == "alice" { throw Broken() } })
        try await HTTPHarness.with(driver, workers: 1, workerHooks: hooks) { http in
            var pushed = try await http.push([Op.create("weightLogs", "w1", ["kg": 1], key: "k1"), Op.create("weightLogs", "w2", ["kg": 2], key: "k2")], wait: 30_000)
            // A loaded machine may take longer than the push's wait for the attempts: then the
            // status URL answers once the job died.
            if pushed.status == 202, let id = pushed.json?["job_id"]?.stringValue {
                try await eventually("the job to die") {
                    let status = try await http.send(.get, "/v1/jobs/\(id)", headers: try await http.headers())
                    guard status.json?["status"] == "dead" else { return false }
                    pushed = (status.status, status.json, status.headers)
                    return true
                }
            }
            #expect(pushed.status == 200 && pushed.json?["status"] == "dead", "\(String(describing: pushed.json))")
            let results = pushed.json?["results"]?.arrayValue ?? []
            #expect(results.map { $0["status"] } == ["rejected", "rejected"])
            #expect(results.allSatisfy { $0["error_code"] == "INTERNAL" && $0["retryable"] == true })
            #expect(results.map { $0["idempotency_key"] } == ["k1", "k2"])
            let id = try #require(pushed.json?["job_id"]?.stringValue)
            let status = try await http.send(.get, "/v1/jobs/\(id)", headers: try await http.headers())
            #expect(status.status == 200 && status.json?["status"] == "dead" && status.json?["results"] == pushed.json?["results"])
            #expect(try await http.pullAll().changes.isEmpty)
        }
    }

    /// `force_resync` through HTTP: no changes, the cursor handed back unchanged, no error.
    @Test(arguments: Driver.selected)
    func forceResyncAnswersThroughHTTP(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            _ = try await http.results([Op.create("weightLogs", "w1", ["kg": 1])])
            let cursor = try await http.pullAll().cursor
            try await http.store.store.forceResync(userID: "alice")
            let page = try await http.pull(query: "cursor=\(cursor)")
            #expect(page.status == 200)
            #expect(page.json?["force_resync"] == true && page.json?["changes"] == [] && page.json?["cursor"] == .string(cursor))
            // Starting over clears it.
            let fresh = try await http.pullAll()
            #expect(fresh.last["force_resync"] == false && fresh.changes.count == 1)
        }
    }

    /// A cursor from before a purged tombstone gets `409 CURSOR_INVALID`, not retryable; a fresh
    /// bootstrap works.
    @Test(arguments: Driver.selected)
    func aCursorOlderThanAPurgeIsRefusedThroughHTTP(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            _ = try await http.results([Op.create("weightLogs", "w1", ["kg": 1])])
            let old = try await http.pullAll().cursor
            _ = try await http.results([Op.delete("weightLogs", "w1", base: 1)])
            #expect(try await http.store.store.purgeTombstones(olderThanMilliseconds: -1_000).purgedTombstones == 1)
            let refused = try await http.pull(query: "cursor=\(old)")
            #expect(refused.status == 409 && refused.json?.errorCode == "CURSOR_INVALID")
            #expect(refused.json?["error"]?["retryable"] == false)
            let fresh = try await http.pullAll()
            #expect(fresh.changes.isEmpty && fresh.last["has_more"] == false)
        }
    }
}
