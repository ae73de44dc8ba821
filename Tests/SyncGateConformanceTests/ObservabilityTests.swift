import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import InMemoryTracing
import Logging
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateServer
import SyncGateStorage
import SyncGateTestSupport
import Testing
import Tracing
import SyncGateConcurrency

/// Traces and request logs, through the production application on every driver.
@Suite(.timeLimit(.minutes(10))) struct ObservabilityTests {
    /// One push is one trace: the request's server span, the enqueue on the front, the worker's
    /// claim and apply (joined through the trace context stored with the job), the notification
    /// at commit, and the front's wait for the answer.
    @Test(arguments: Driver.selected)
    func aPushIsOneConnectedTraceFromRequestToApply(_ driver: Driver) async throws {
        let tracer = InMemoryTracer()
        try await HTTPHarness.with(driver, server: { $0.tracer = tracer }) { http in
            let pushed = try await http.push([Op.create("weightLogs", "w1", ["kg": 70], key: "k1")], wait: 30_000)
            #expect(pushed.status == 200 && pushed.json?["status"] == "done")
            // The answer can leave the front before the worker's spans end: the front hears of the
            // commit from the notification while the worker's apply is still returning from it.
            let names: Set = ["POST /v1/sync/push", "enqueue", "wait for job", "claim", "apply", "notify"]
            try await eventually("every span of the push ends", every: .milliseconds(10)) {
                names.isSubset(of: tracer.finishedSpans.map(\.operationName))
            }
            let request = try #require(tracer.finishedSpans.first { $0.operationName == "POST /v1/sync/push" })
            let trace = tracer.finishedSpans.filter { $0.traceID == request.traceID }
            func span(_ name: String) throws -> InMemorySpanContext {
                try #require(trace.first { $0.operationName == name }?.spanContext, "no \(name) span in the push's trace: \(trace.map(\.operationName))")
            }
            let enqueue = try span("enqueue"), claim = try span("claim"), apply = try span("apply"), notify = try span("notify")
            let wait = try span("wait for job")
            #expect(request.spanContext.parentSpanID == nil)
            #expect(enqueue.parentSpanID == request.spanContext.spanID)
            #expect(wait.parentSpanID == request.spanContext.spanID)
            // The worker's spans descend from the enqueue: the context travelled with the job.
            #expect(claim.parentSpanID == enqueue.spanID)
            #expect(apply.parentSpanID == enqueue.spanID)
            #expect(notify.parentSpanID == apply.spanID)
            let attributes = try #require(trace.first { $0.operationName == "POST /v1/sync/push" }?.attributes)
            #expect(attributes["http.response.status_code"]?.toSpanAttribute() == 200)
            #expect(attributes["http.route"]?.toSpanAttribute() == "/v1/sync/push")
        }
    }

    /// A caller's `traceparent`-style context is continued, not replaced.
    @Test func aRequestJoinsTheCallersTrace() async throws {
        let tracer = InMemoryTracer()
        try await HTTPHarness.with(.sqlite, workers: 0, server: { $0.tracer = tracer }) { http in
            var headers = try await http.headers()
            headers[HTTPField.Name(InMemoryTracer.traceIDKey)!] = "caller-trace"
            headers[HTTPField.Name(InMemoryTracer.spanIDKey)!] = "caller-span"
            #expect(try await http.send(.get, "/v1/sync/pull", headers: headers).status == 200)
            try await eventually("the request span ends", every: .milliseconds(10)) {
                tracer.finishedSpans.contains { $0.operationName == "GET /v1/sync/pull" }
            }
            let span = try #require(tracer.finishedSpans.first { $0.operationName == "GET /v1/sync/pull" })
            #expect(span.traceID == "caller-trace")
            #expect(span.spanContext.parentSpanID == "caller-span")
        }
    }

    /// `SYNCGATE_LOG_FORMAT=json`: every line is one JSON object; each request logs one line at
    /// info with route, status, duration and user, and never the token.
    @Test(arguments: Driver.selected)
    func requestsLogOneJSONLineEachWithTheUserAndNeverTheToken(_ driver: Driver) async throws {
        let lines = Locked<[String]>([])
        var logger = Logger(label: "syncgate") { label in JSONLogHandler(label: label, write: { line in lines.update { $0.append(line) } }) }
        logger.logLevel = .info
        let token = try await HTTPHarness.with(driver, logger: logger) { http in
            let headers = try await http.headers("carol")
            #expect(try await http.send(.get, "/v1/sync/pull", headers: headers).status == 200)
            var unauthenticated = headers
            unauthenticated[.authorization] = "Bearer not-a-token"
            #expect(try await http.send(.get, "/v1/sync/pull", headers: unauthenticated).status == 401)
            return headers[.authorization] ?? ""
        }
        let objects = try lines.value.map { line in
            #expect(line.hasSuffix("\n") && line.dropLast().contains("\n") == false)
            return try #require(try JSONParser().parse(line).objectValue, "not a JSON object: \(line)")
        }
        for object in objects {
            #expect(object["time"]?.stringValue.flatMap(Timestamp.init(rfc3339:)) != nil)
            #expect(object["level"]?.stringValue != nil && object["message"]?.stringValue != nil)
        }
        let requests = objects.filter { $0["message"] == "request" && $0["http.route"] == "/v1/sync/pull" }
        #expect(requests.count == 2)
        #expect(requests.contains { $0["http.status"] == "200" && $0["syncgate.user"] == "carol" && $0["level"] == "info" })
        #expect(requests.contains { $0["http.status"] == "401" && $0["syncgate.user"] == nil })
        #expect(requests.allSatisfy { $0["http.duration_ms"]?.stringValue.flatMap(Double.init) != nil })
        let secret = String(token.dropFirst("Bearer ".count))
        #expect(!secret.isEmpty && !lines.value.contains { $0.contains(secret) || $0.contains("not-a-token") })
    }
}

/// Tokens from the app's identity provider (a JWKS served in the test), beside the HS256 secret.
@Suite(.timeLimit(.minutes(10))) struct IdentityProviderTests {
    static let logger: Logger = {
        var logger = Logger(label: "idp-tests")
        logger.logLevel = .critical
        return logger
    }()

    static func authority(
        _ provider: TestIdentityProvider, userClaim: String = "sub", secret: String? = nil, clock: MovedClock = MovedClock()
    ) async -> TokenAuthority {
        let keys = IdentityProviderKeys(
            configuration: provider.configuration(userClaim: userClaim), minimumRefreshInterval: .milliseconds(300), logger: logger, clock: clock.now
        )
        return await TokenAuthority(secret: secret, identityProvider: keys)
    }

    /// The keys' clock, moved only by the test: refresh intervals pass when it says so, not
    /// while a loaded machine runs the test slowly.
    final class MovedClock: Sendable {
        private let instant = Locked(ContinuousClock.now)
        var now: @Sendable () -> ContinuousClock.Instant { { [instant] in instant.value } }
        func advance(_ duration: Duration) { instant.update { $0 += duration } }
    }

    /// `accepted`, or the protocol error code the token gets.
    static func code(_ authority: TokenAuthority, _ token: String) async -> String {
        do {
            _ = try await authority.verify(token)
            return "accepted"
        } catch {
            return error.code.rawValue
        }
    }

    @Test func rs256ES256EdDSAAndAConfiguredUserClaim() async throws {
        try await TestIdentityProvider.with { provider in
            let rsa = try await TestIdentityProvider.Key.rs256("rsa-1")
            let ec = try await TestIdentityProvider.Key.es256("ec-1")
            let ed = try await TestIdentityProvider.Key.eddsa("ed-1")
            provider.publish([rsa, ec, ed])
            let authority = await Self.authority(provider)
            #expect(try await authority.verify(try await provider.token(rsa, user: "alice")).userID == "alice")
            #expect(try await authority.verify(try await provider.token(ec, user: "bob")).userID == "bob")
            #expect(try await authority.verify(try await provider.token(ed, user: "dana")).userID == "dana")
            let custom = await Self.authority(provider, userClaim: "uid")
            #expect(try await custom.verify(try await provider.token(ec, user: "carol", userClaim: "uid")).userID == "carol")
            // A token without the configured claim names no user.
            #expect(await Self.code(custom, try await provider.token(ec, user: "dave")) == "UNAUTHENTICATED")
        }
    }

    /// Several providers: one that is down keeps its own keys in hand and does not hold back the
    /// others' (their tokens are verified, and keys they rotate in are learned).
    @Test func aProviderThatIsDownDoesNotHoldBackTheOthers() async throws {
        try await TestIdentityProvider.with { up in
            try await TestIdentityProvider.with { down in
                let first = try await TestIdentityProvider.Key.es256("up-1")
                up.publish([first])
                down.setDown(true)
                let configuration = IdentityProviderKeys.Configuration(
                    jwksURLs: [down.url, up.url], issuer: TestIdentityProvider.issuer, audience: TestIdentityProvider.audience
                )
                let clock = MovedClock()
                let keys = IdentityProviderKeys(configuration: configuration, minimumRefreshInterval: .milliseconds(300), logger: Self.logger, clock: clock.now)
                let authority = await TokenAuthority(secret: nil, identityProvider: keys)
                #expect(await keys.refresh() == false)
                #expect(await Self.code(authority, try await up.token(first, user: "alice")) == "accepted")
                // A key the healthy provider rotates in is learned while the other is still down.
                let second = try await TestIdentityProvider.Key.es256("up-2")
                up.publish([first, second])
                clock.advance(.seconds(1))
                #expect(await Self.code(authority, try await up.token(second, user: "bob")) == "accepted")
                // A key id neither has: the one that is down might hold it (503, not 401).
                let stranger = try await TestIdentityProvider.Key.es256("elsewhere")
                clock.advance(.seconds(1))
                #expect(await Self.code(authority, try await up.token(stranger, user: "carol")) == "UNAVAILABLE")
            }
        }
    }

    /// A provider that answers its head and then stalls is given up on at the fetch timeout,
    /// not the HTTP client's read timeout: requests that wait for a new key id wait that long.
    @Test func aStalledKeysAnswerEndsAtTheFetchTimeout() async throws {
        let router = Router()
        router.get("jwks") { _, _ in
            Response(status: .ok, body: ResponseBody { writer in
                try await writer.write(ByteBuffer(string: "{\"keys\":["))
                try await Task.sleep(for: .seconds(3600))
                try await writer.finish(nil)
            })
        }
        let outcome = try await withTestHTTPServer(router) { port in
            let configuration = IdentityProviderKeys.Configuration(
                jwksURLs: ["http://127.0.0.1:\(port)/jwks"], issuer: TestIdentityProvider.issuer, audience: TestIdentityProvider.audience
            )
            let keys = IdentityProviderKeys(configuration: configuration, fetchTimeout: .milliseconds(300), logger: Self.logger)
            // The hang guard, far above the 300 ms timeout on a busy machine.
            return try await withThrowingTaskGroup(of: String.self) { group in
                group.addTask { await keys.refresh() ? "fetched" : "failed" }
                group.addTask {
                    try await Task.sleep(for: .seconds(60))
                    return "still waiting"
                }
                defer { group.cancelAll() }
                return try await group.next() ?? "none"
            }
        }
        #expect(outcome == "failed")
    }

    @Test func wrongIssuerAudienceExpiryOrSignatureAreRefused() async throws {
        try await TestIdentityProvider.with { provider in
            let key = try await TestIdentityProvider.Key.es256("k1")
            let stranger = try await TestIdentityProvider.Key.es256("k1")
            provider.publish([key])
            let authority = await Self.authority(provider)
            let cases: [(String, String)] = [
                ("issuer", try await provider.token(key, issuer: "https://evil.test/")),
                ("audience", try await provider.token(key, audience: "another-app")),
                ("expired", try await provider.token(key, expiresIn: -120)),
                ("too long", try await provider.token(key, expiresIn: 90 * 86_400)),
                // Same key id, another key: the signature does not verify.
                ("signature", try await provider.token(stranger)),
            ]
            for (name, token) in cases {
                #expect(await Self.code(authority, token) == "UNAUTHENTICATED", "\(name)")
            }
            #expect(try await authority.verify(try await provider.token(key)).userID == "alice")
        }
    }

    /// A provider key cannot be used as an HMAC secret, and HS256 tokens need the server's secret.
    @Test func algorithmsStayWithTheirKeys() async throws {
        try await TestIdentityProvider.with { provider in
            let key = try await TestIdentityProvider.Key.rs256("k1")
            provider.publish([key])
            let providerOnly = await Self.authority(provider)
            let hs256 = try await TokenAuthority(secret: HTTPHarness.secret).issue(userID: "mallory", ttlSeconds: 600)
            #expect(await Self.code(providerOnly, hs256) == "UNAUTHENTICATED")
            let both = await Self.authority(provider, secret: HTTPHarness.secret)
            #expect(try await both.verify(hs256).userID == "mallory")
            #expect(try await both.verify(try await provider.token(key)).userID == "alice")
        }
    }

    /// Rotation: a token with a key id not seen before makes the server fetch the JWKS again, at
    /// once; made-up key ids cannot make it fetch more than once per interval.
    @Test func rotationAndUnknownKeyIDs() async throws {
        try await TestIdentityProvider.with { provider in
            let old = try await TestIdentityProvider.Key.es256("2026-01")
            let new = try await TestIdentityProvider.Key.es256("2026-02")
            provider.publish([old])
            let clock = MovedClock()
            let authority = await Self.authority(provider, clock: clock)
            #expect(try await authority.verify(try await provider.token(old)).userID == "alice")
            let fetched = provider.fetches
            provider.publish([old, new])
            clock.advance(.milliseconds(350))
            #expect(try await authority.verify(try await provider.token(new)).userID == "alice")
            #expect(provider.fetches == fetched + 1)

            // Keys the provider does not publish: one fetch, then the rest within the interval
            // fetch nothing.
            let made = try await TestIdentityProvider.Key.es256("made-up")
            var tokens: [String] = []
            for _ in 0..<20 { tokens.append(try await provider.token(made)) }
            clock.advance(.milliseconds(350))
            let before = provider.fetches
            for token in tokens {
                #expect(await Self.code(authority, token) == "UNAUTHENTICATED")
            }
            #expect(provider.fetches == before + 1)
            // The old key is withdrawn: once a refresh has happened (here: another unknown id after
            // the interval) its tokens no longer verify.
            provider.publish([new])
            clock.advance(.milliseconds(350))
            #expect(await Self.code(authority, try await provider.token(made)) == "UNAUTHENTICATED")
            #expect(provider.fetches == before + 2)
            #expect(await Self.code(authority, try await provider.token(old)) == "UNAUTHENTICATED")
        }
    }

    /// The provider goes down: tokens of keys in hand keep working; a key never seen is 503
    /// (retryable), not 401; when it is back, the new key is learned.
    @Test func theServerKeepsServingWhileTheProviderIsDown() async throws {
        try await TestIdentityProvider.with { provider in
            let key = try await TestIdentityProvider.Key.rs256("k1")
            let next = try await TestIdentityProvider.Key.es256("k2")
            provider.publish([key])
            let clock = MovedClock()
            let authority = await Self.authority(provider, clock: clock)
            #expect(try await authority.verify(try await provider.token(key)).userID == "alice")
            provider.setDown(true)
            provider.publish([key, next])
            clock.advance(.milliseconds(350))
            for _ in 0..<3 {
                #expect(try await authority.verify(try await provider.token(key)).userID == "alice")
            }
            let fetched = provider.fetches
            #expect(await Self.code(authority, try await provider.token(next)) == "UNAVAILABLE")
            #expect(provider.fetches == fetched + 1)
            // Within the refresh interval no new fetch: still unavailable, not "unknown key".
            #expect(await Self.code(authority, try await provider.token(next)) == "UNAVAILABLE")
            #expect(provider.fetches == fetched + 1)
            provider.setDown(false)
            clock.advance(.milliseconds(350))
            #expect(try await authority.verify(try await provider.token(next)).userID == "alice")
        }
    }

    /// Keys past their lifetime while the provider is down: still used, and the provider is asked
    /// again at most once per refresh interval, not by every request.
    @Test func dueKeysAreRefreshedAtMostOncePerIntervalWhileTheProviderIsDown() async throws {
        try await TestIdentityProvider.with { provider in
            let key = try await TestIdentityProvider.Key.es256("k1")
            provider.publish([key])
            provider.setCacheControl("max-age=0")
            let interval = Duration.seconds(1)
            let clock = MovedClock()
            let keys = IdentityProviderKeys(
                configuration: provider.configuration(), minimumRefreshInterval: interval, minimumLifetime: .milliseconds(50), logger: Self.logger,
                clock: clock.now
            )
            let authority = await TokenAuthority(secret: nil, identityProvider: keys)
            #expect(try await authority.verify(try await provider.token(key)).userID == "alice")
            // Thirty users' tokens: each needs the keys (a verified token is not verified again).
            var tokens: [String] = []
            for user in 0..<30 { tokens.append(try await provider.token(key, user: "user\(user)")) }
            provider.setDown(true)
            clock.advance(interval + .milliseconds(50))
            let before = provider.fetches
            for (user, token) in tokens.enumerated().prefix(15) {
                #expect(try await authority.verify(token).userID == "user\(user)")
            }
            // The due keys' refresh runs beside the requests (they do not wait for it): one, in
            // an interval that does not pass until the clock is moved.
            try await eventually("the due keys' refresh") { provider.fetches >= before + 1 }
            try await eventually("the due keys' refresh over") { await !keys.refreshing }
            #expect(provider.fetches == before + 1)
            // Another interval: one more, whatever the requests in it.
            clock.advance(interval)
            for (user, token) in tokens.enumerated().dropFirst(15) {
                #expect(try await authority.verify(token).userID == "user\(user)")
            }
            try await eventually("the next interval's refresh") { provider.fetches >= before + 2 }
            try await eventually("the next interval's refresh over") { await !keys.refreshing }
            #expect(provider.fetches == before + 2)
        }
    }

    /// Before any key could be fetched (the provider is down at start), provider tokens are 503.
    @Test func aProviderDownAtStartIsUnavailableNotUnauthenticated() async throws {
        try await TestIdentityProvider.with { provider in
            let key = try await TestIdentityProvider.Key.es256("k1")
            provider.publish([key])
            provider.setDown(true)
            let authority = await Self.authority(provider)
            #expect(await Self.code(authority, try await provider.token(key)) == "UNAVAILABLE")
        }
    }

    @Test func cacheControlSetsHowLongKeysAreKept() {
        #expect(IdentityProviderKeys.lifetime(cacheControl: "public, max-age=21600, must-revalidate") == .seconds(21600))
        #expect(IdentityProviderKeys.lifetime(cacheControl: "max-age=5") == .seconds(60))
        #expect(IdentityProviderKeys.lifetime(cacheControl: "max-age=9999999") == .seconds(86_400))
        #expect(IdentityProviderKeys.lifetime(cacheControl: "no-store") == .seconds(60))
        #expect(IdentityProviderKeys.lifetime(cacheControl: "") == .seconds(3600))
    }

    /// End to end: an RS256 token from the provider pushes and pulls through the production app.
    @Test(arguments: Driver.selected)
    func anRS256TokenFromTheProviderPushesAndPulls(_ driver: Driver) async throws {
        try await TestIdentityProvider.with { provider in
            let key = try await TestIdentityProvider.Key.rs256("rsa-1")
            provider.publish([key])
            try await HTTPHarness.with(driver, server: { $0.identityProvider = provider.configuration() }) { http in
                var headers: HTTPFields = [.authorization: "Bearer \(try await provider.token(key, user: "erin"))", .contentType: "application/json"]
                headers[HTTPField.Name("X-Device-Id")!] = "phone"
                let body = JSONValue.object(["operations": .array([Op.create("weightLogs", "w1", ["kg": 61], key: "k1").json])]).serialized()
                let pushed = try await http.send(.post, "/v1/sync/push?wait=30000", headers: headers, body: body)
                #expect(pushed.status == 200 && pushed.json?["results"]?[0]?["status"] == "applied")
                headers[HTTPField.Name("X-Device-Id")!] = "tablet"
                let pulled = try await http.send(.get, "/v1/sync/pull", headers: headers)
                #expect(pulled.json?["changes"]?[0]?["data"] == ["kg": 61])
                // The same user, through an HS256 token of the server's secret, sees the same data.
                #expect(try await http.state(user: "erin").count == 1)
            }
        }
    }
}
