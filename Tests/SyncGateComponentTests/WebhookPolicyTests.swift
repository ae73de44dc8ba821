import AsyncHTTPClient
import Crypto
import Foundation
import SyncGateCore
import SyncGateStorage
import SyncGateTestSupport
@testable import SyncGateWebhooks
import SyncGateWire
import Synchronization
import Testing

/// The pure parts of change webhooks: signing, which addresses are refused, retries, payloads.
struct WebhookPolicyTests {
    @Test func signsAsStandardWebhooksSpecifies() throws {
        // The Standard Webhooks reference libraries' test vector.
        let key = try #require(WebhookSignature.key(of: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))
        let body = Array(#"{"test": 2432232314}"#.utf8)
        let signature = WebhookSignature.sign(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: body, key: key)
        #expect(signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        #expect(WebhookSignature.verify(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: body, header: "v1,bm90IGl0 \(signature)", key: key))
        #expect(!WebhookSignature.verify(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_331, body: body, header: signature, key: key))
        #expect(!WebhookSignature.verify(id: "msg_other", timestamp: 1_614_265_330, body: body, header: signature, key: key))
        #expect(!WebhookSignature.verify(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: body + [0x20], header: signature, key: key))
    }

    @Test func secretsAreWhsecAndBase64OfEnoughBytes() {
        let secret = WebhookSignature.newSecret()
        #expect(secret.hasPrefix("whsec_"))
        #expect(WebhookSignature.key(of: secret) != nil)
        #expect(WebhookSignature.newSecret() != secret)
        #expect(WebhookSignature.key(of: "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == nil)
        #expect(WebhookSignature.key(of: "whsec_c2hvcnQ=") == nil)  // 5 bytes
        #expect(WebhookSignature.key(of: "whsec_not base64!") == nil)
    }

    @Test(arguments: [
        ("127.0.0.1", true), ("127.9.9.9", true), ("10.1.2.3", true), ("172.16.0.1", true), ("172.31.255.255", true), ("172.32.0.1", false),
        ("192.168.1.1", true), ("169.254.169.254", true), ("100.64.0.1", true), ("100.128.0.1", false), ("0.0.0.0", true),
        ("224.0.0.1", true), ("255.255.255.255", true), ("198.18.0.1", true), ("192.0.2.7", true), ("192.0.0.9", true), ("192.0.3.1", false), ("192.1.0.1", false), ("8.8.8.8", false), ("93.184.216.34", false),
        ("::1", true), ("::", true), ("fe80::1", true), ("fc00::1", true), ("fd12:3456::1", true), ("ff02::1", true),
        ("::ffff:127.0.0.1", true), ("::ffff:10.0.0.1", true), ("::ffff:8.8.8.8", false), ("64:ff9b::a00:1", true),
        ("2001:db8::1", true), ("2606:4700::1111", false),
        // Prefixes that carry an IPv4 address: judged by it, or refused where it cannot be read.
        ("2002:7f00:1::1", true), ("2002:a00:1::", true), ("2002:808:808::1", false), ("2001:0:4136:e378:8000:63bf:3fff:fdd2", true),
        ("64:ff9b::808:808", false), ("64:ff9b:1::a00:1", true), ("64:ff9b:1:2::808:808", true),
    ])
    func refusesInternalAddresses(_ address: String, _ inside: Bool) throws {
        #expect(WebhookAddressPolicy.isInternal(try Self.bytes(address)) == inside, "\(address)")
    }

    static func bytes(_ text: String) throws -> [UInt8] {
        if text.contains(":") {
            var address = in6_addr()
            guard inet_pton(AF_INET6, text, &address) == 1 else { throw CancellationError() }
            return withUnsafeBytes(of: address) { Array($0) }
        }
        var address = in_addr()
        guard inet_pton(AF_INET, text, &address) == 1 else { throw CancellationError() }
        return withUnsafeBytes(of: address) { Array($0) }
    }

    static func refusal(_ url: String) -> WebhookAddressPolicy.Refusal? {
        if case .failure(let refusal) = WebhookAddressPolicy.parse(url) { return refusal }
        return nil
    }

    @Test func parsesReceiverURLs() throws {
        let https = try WebhookAddressPolicy.parse("https://hooks.example.com/sync?x=1").get()
        #expect(https.secure && https.host == "hooks.example.com" && https.port == 443)
        let http = try WebhookAddressPolicy.parse("http://10.0.0.1:8080/hook").get()
        #expect(!http.secure && http.host == "10.0.0.1" && http.port == 8080)
        // Credentials are never sent, and a host other parsers could read otherwise is refused.
        #expect(Self.refusal("http://user:pw@10.0.0.1:8080/hook") == WebhookAddressPolicy.Refusal.credentials)
        for odd in ["http://127.0.0.1%00.w.example/", "http://%6cocalhost/", "http://ex ample.com/", "http://exa\u{301}mple.com/", "http://[::1%25eth0]/", "http://a_b.example/"] {
            #expect(Self.refusal(odd) == WebhookAddressPolicy.Refusal.oddHost, "\(odd)")
        }
        #expect(try WebhookAddressPolicy.parse("https://Hooks-1.Example.com./x").get().host == "Hooks-1.Example.com.")
        let v6 = try WebhookAddressPolicy.parse("http://[::1]:9000/").get()
        #expect(v6.host == "::1" && v6.port == 9000)
        #expect(Self.refusal("ftp://example.com") == WebhookAddressPolicy.Refusal.notHTTP)
        #expect(Self.refusal("file:///etc/passwd") == WebhookAddressPolicy.Refusal.notHTTP)
        #expect(Self.refusal("https:///hook") == WebhookAddressPolicy.Refusal.noHost)
        #expect(Self.refusal("https://example.com:99999/") == WebhookAddressPolicy.Refusal.noHost)
    }

    @Test func retriesWithJitteredBackoffThenPauses() {
        let policy = WebhookRetryPolicy(delays: [.seconds(5), .seconds(300)], jitter: 0.2)
        #expect(policy.afterFailure(attempts: 1, error: "500", now: 1000, unit: 0.5) == .retry(at: 6000))
        #expect(policy.afterFailure(attempts: 1, error: "500", now: 1000, unit: 0) == .retry(at: 5000))
        #expect(policy.afterFailure(attempts: 1, error: "500", now: 1000, unit: 1) == .retry(at: 7000))
        #expect(policy.afterFailure(attempts: 2, error: "500", now: 0, unit: 0.5) == .retry(at: 300_000))
        #expect(policy.afterFailure(attempts: 3, error: "500", now: 0, unit: 0.5) == .pause)
        #expect(policy.afterFailure(attempts: 0, error: "500", now: 0, unit: 0.5) == .pause)
        // The standard schedule retries for more than a day before it pauses.
        let total = WebhookRetryPolicy.standard.delays.reduce(Duration.zero, +)
        #expect(total > .seconds(86_400))
        #expect(WebhookRetryPolicy.delivered(status: 204) && !WebhookRetryPolicy.delivered(status: 301) && !WebhookRetryPolicy.delivered(status: 500))
    }

    static func change(_ scope: Scope, _ seq: Int64, _ type: String, _ id: String, version: Int64, deleted: Bool = false) -> AnnouncedChange {
        AnnouncedChange(
            scope: scope,
            row: ChangeRow(
                sequence: seq, entityType: type, entityID: id, version: version, data: deleted ? nil : #"{"n": \#(seq), "note": "a \"quoted\" line\n"}"#,
                updatedAt: 1_000 * seq, origin: seq == 3 ? "service:billing" : nil
            ),
            committedAt: 1_000 * seq + 1
        )
    }

    @Test func rendersAMessageOfWhatItsSubscriptionWantsOfItsRange() throws {
        let alice = [
            Self.change(.user("alice"), 1, "weightLogs", "w1", version: 1),
            Self.change(.user("alice"), 2, "weightLogs", "w1", version: 2),
            Self.change(.user("alice"), 3, "recentFoods", "r1", version: 1),
        ]
        let home = [
            Self.change(.household("home"), 7, "household_members", "home:bob", version: 1),
            Self.change(.household("home"), 8, "inventory", "eggs", version: 4, deleted: true),
        ]
        let everything = WebhookSubscription(id: 1, name: "all", url: "u", secret: "s", entityTypes: nil, events: Set(WebhookEvent.allCases), createdAt: .init(millisecondsSinceEpoch: 0))
        let weights = WebhookSubscription(id: 2, name: "w", url: "u", secret: "s", entityTypes: ["weightLogs"], events: [.updated], createdAt: .init(millisecondsSinceEpoch: 0))
        let members = WebhookSubscription(id: 3, name: "m", url: "u", secret: "s", entityTypes: nil, events: [.membership, .deleted], createdAt: .init(millisecondsSinceEpoch: 0))
        func message(_ subscription: WebhookSubscription, _ scope: Scope, _ changes: [AnnouncedChange]) -> (body: String, changes: Int)? {
            WebhookPayload.render(WebhookDelivery(
                id: 5, subscription: subscription, scope: scope, firstSequence: changes.first?.row.sequence ?? 1,
                lastSequence: changes.last?.row.sequence ?? 1, committedAt: 0, createdAt: 99_000, attempts: 1, leaseEnd: 0, claimNumber: 1, changes: changes
            ))
        }
        #expect(message(everything, .user("alice"), alice)?.changes == 3)
        #expect(message(weights, .user("alice"), alice)?.changes == 1)
        #expect(message(members, .user("alice"), alice) == nil)
        #expect(message(members, .household("home"), home)?.changes == 2)
        #expect(message(everything, .user("alice"), []) == nil)
        let first = try #require(message(everything, .user("alice"), alice))
        // The same message renders the same bytes at every attempt.
        #expect(message(everything, .user("alice"), alice)?.body == first.body)
        let body = try JSONParser().parse(Array(first.body.utf8))
        #expect(body["type"]?.stringValue == "sync.changes")
        #expect(body["timestamp"]?.stringValue == "1970-01-01T00:01:39.000Z")
        #expect(body["data"]?["user_id"]?.stringValue == "alice")
        let sent = try #require(body["data"]?["changes"]?.arrayValue)
        #expect(sent.map { $0["event"]?.stringValue ?? "" } == ["created", "updated", "created"])
        #expect(sent[2]["origin"]?.stringValue == "service:billing" && sent[0]["origin"] == nil)
        let household = try JSONParser().parse(Array(try #require(message(everything, .household("home"), home)).body.utf8))
        #expect(household["data"]?["household_id"]?.stringValue == "home")
        #expect(household["data"]?["changes"]?.arrayValue?.map { $0["event"]?.stringValue ?? "" } == ["membership", "deleted"])
        #expect(household["data"]?["changes"]?[1]?["data"] == .null)
        // The stored document is spliced in as it is; everything else is escaped: the body is the
        // JSON the value serializer would write, key order included.
        #expect(sent[0]["data"] == ["n": 1, "note": "a \"quoted\" line\n"])
        let odd = AnnouncedChange(
            scope: .user("al\"ice\u{2028}"),
            row: ChangeRow(sequence: 1, entityType: "t\\", entityID: "a\nb", version: 2, data: "[1,2]", updatedAt: 0, origin: "service:\"x\""),
            committedAt: 0
        )
        let rendered = WebhookPayload.body(scope: odd.scope, changes: [odd], now: 0)
        let expected: JSONValue = [
            "type": "sync.changes", "timestamp": "1970-01-01T00:00:00.000Z",
            "data": [
                "user_id": "al\"ice\u{2028}",
                "changes": [[
                    "seq": 1, "event": "updated", "entity_type": "t\\", "entity_id": "a\nb", "version": 2, "data": [1, 2],
                    "updated_at": "1970-01-01T00:00:00.000Z", "origin": "service:\"x\"",
                ]],
            ],
        ]
        #expect(rendered == expected.serialized())
    }

    @Test(.timeLimit(.minutes(2)))
    func aHostWhoseLookUpDoesNotAnswerFailsWithinTheAttemptsTime() async throws {
        var configuration = WebhookConfiguration()
        configuration.timeout = .milliseconds(200)
        let client = WebhookSender.makeClient(configuration)
        // A name server that never answers, and a look-up that cannot be cancelled (getaddrinfo):
        // it ends only when the test lets it, after the attempt.
        let lookUps = ParkedLookUps()
        let sender = WebhookSender(client: client, configuration: configuration) { _ in
            await withCheckedContinuation { lookUps.park($0) }
            return []
        }
        let subscription = WebhookSubscription(
            id: 1, name: "slow", url: "https://receiver.example/hook", secret: WebhookSignature.newSecret(), entityTypes: nil,
            events: Set(WebhookEvent.allCases), createdAt: Timestamp(millisecondsSinceEpoch: 0)
        )
        let delivery = WebhookDelivery(id: 1, subscription: subscription, scope: .user("u1"), firstSequence: 1, lastSequence: 1, committedAt: 0, createdAt: 0, attempts: 1, leaseEnd: 0, claimNumber: 1)
        let result = await sender.attempt(delivery, body: "{}", timestamp: 0)
        lookUps.release()
        await sender.shutdown()
        try await client.shutdown()
        guard case .failed(let reason) = result else {
            Issue.record("expected a failed attempt, got \(result)")
            return
        }
        #expect(reason.contains("was not looked up within"))
    }

    /// The address the SSRF check passed is the one connected to: a host whose next look-up
    /// would say something else (DNS rebinding) is not reached there. Here the check's look-up
    /// says 127.0.0.2 and the system's says 127.0.0.1, where the receiver listens; only
    /// 127.0.0.1 counts as internal, so that a local receiver can stand for a public one.
    @Test(.timeLimit(.minutes(2)))
    func anAttemptConnectsToTheAddressItsCheckPassed() async throws {
        var settings = WebhookConfiguration()
        settings.timeout = .seconds(30)
        let configuration = settings
        let secret = WebhookSignature.newSecret()
        let receiver = WebhookReceiver(secret: secret)
        try await withTestHTTPServer(receiver.router) { port in
            let subscription = WebhookSubscription(
                id: 1, name: "r", url: "http://LocalHost:\(port)/hook", secret: secret, entityTypes: nil,
                events: Set(WebhookEvent.allCases), createdAt: Timestamp(millisecondsSinceEpoch: 0)
            )
            let delivery = WebhookDelivery(
                id: 1, subscription: subscription, scope: .user("u1"), firstSequence: 1, lastSequence: 1, committedAt: 0, createdAt: 0, attempts: 1, leaseEnd: 0,
                claimNumber: 1
            )
            let client = WebhookSender.makeClient(configuration)
            func send(checkedAddress: [UInt8]) async -> WebhookSender.Result {
                let sender = WebhookSender(client: client, configuration: configuration, resolve: { _ in [checkedAddress] }, isInternal: { $0 == [127, 0, 0, 1] })
                let result = await sender.attempt(delivery, body: "{}", timestamp: 0)
                await sender.shutdown()
                return result
            }
            let rebound = await send(checkedAddress: [127, 0, 0, 2])
            #expect(receiver.deliveries.isEmpty, "the attempt reached the address the check did not pass")
            if case .delivered = rebound { Issue.record("delivered through a look-up the check did not make") }
            // The check's own address is reached (the receiver's, allowed by the test's rule).
            let allowed = WebhookSender(client: client, configuration: configuration, resolve: { _ in [[127, 0, 0, 1]] }, isInternal: { _ in false })
            #expect(await allowed.attempt(delivery, body: "{}", timestamp: 0) == .delivered(status: 200))
            #expect(allowed.pinned.count == 1)
            await allowed.shutdown()
            // With an IPv6 address first (2001:db8::1, never routed), the IPv4 one is connected to.
            let v6: [UInt8] = [0x20, 0x01, 0x0D, 0xB8] + Array(repeating: 0, count: 11) + [1]
            let both = WebhookSender(client: client, configuration: configuration, resolve: { _ in [v6, [127, 0, 0, 1]] }, isInternal: { _ in false })
            #expect(await both.attempt(delivery, body: "{}", timestamp: 0) == .delivered(status: 200))
            await both.shutdown()
            try await client.shutdown()
        }
    }

    /// Attempts that give up on a host whose name server does not answer, and come back, join
    /// its one look-up instead of each holding a resolver thread; other hosts are looked up meanwhile.
    @Test(.timeLimit(.minutes(2)))
    func lookUpsOfOneHostAreMadeOnce() async throws {
        let calls = Mutex<[String]>([])
        let parked = ParkedLookUps()
        let lookUps = CoalescedLookups { host in
            calls.withLock { $0.append(host) }
            if host == "slow.example" { await withCheckedContinuation { parked.park($0) } }
            return [[93, 184, 216, 34]]
        }
        for _ in 0..<5 {
            await #expect(throws: WebhookSender.TimedOut.self) {
                try await WebhookSender.unlessLate(.milliseconds(20)) { try await lookUps.addresses(of: "slow.example") }
            }
        }
        #expect(try await lookUps.addresses(of: "fast.example") == [[93, 184, 216, 34]])
        #expect(calls.withLock { $0 } == ["slow.example", "fast.example"])
        #expect(lookUps.count == 1)
        parked.release()
        #expect(try await lookUps.addresses(of: "slow.example") == [[93, 184, 216, 34]])
    }

    @Test func pinnedClientsAreKeptPerHostAndAddressWithinTheirCapacity() async throws {
        let clients = PinnedClients(configuration: .init(), capacity: 2, retireAfter: .zero)
        let a = clients.client(host: "a.example", address: "93.184.216.34")
        #expect(clients.client(host: "a.example", address: "93.184.216.34") === a)
        #expect(clients.client(host: "a.example", address: "93.184.216.35") !== a)
        _ = clients.client(host: "a.example", address: "93.184.216.34")
        // A third pin retires the least recently used (.35), not the one just used.
        _ = clients.client(host: "b.example", address: "93.184.216.36")
        #expect(clients.count == 2)
        // The retired one is shut down and forgotten.
        try await eventually("the retired client shut down") { clients.retiringCount == 0 }
        #expect(clients.client(host: "a.example", address: "93.184.216.34") === a)
        await clients.shutdown()
        #expect(clients.count == 0)
    }

    @Test func aClaimNeverTakesASubscriptionPastItsShare() {
        #expect(WebhookService.nextClaim(inFlight: [:], concurrency: 16, perSubscription: 8) == (16, 8, []))
        // 7 in flight: the claim may take one more of it (not 8: 15 of 16 slots).
        #expect(WebhookService.nextClaim(inFlight: ["slow": 7], concurrency: 16, perSubscription: 8) == (9, 1, []))
        #expect(WebhookService.nextClaim(inFlight: ["slow": 8, "fast": 2], concurrency: 16, perSubscription: 8) == (6, 6, ["slow"]))
        #expect(WebhookService.nextClaim(inFlight: ["a": 8, "b": 8], concurrency: 16, perSubscription: 8) == (0, 8, ["a", "b"]))
        // A failing subscription is left to the probe, and its attempts do not cut the others' room.
        #expect(WebhookService.nextClaim(inFlight: ["down": 1], concurrency: 16, perSubscription: 8, failing: ["down"]) == (15, 8, ["down"]))
        #expect(WebhookService.nextClaim(inFlight: ["up": 2], concurrency: 16, perSubscription: 8, failing: ["down"]) == (14, 6, ["down"]))
    }

    @Test func failingSubscriptionsAreProbedOneAttemptAtATime() {
        // Each failing subscription with nothing in flight: one message, within the free slots;
        // every other known subscription left out.
        #expect(WebhookService.probe(inFlight: [:], concurrency: 16, failing: ["a", "b"], known: ["a", "b", "up"]) == (2, ["up"]))
        #expect(WebhookService.probe(inFlight: ["a": 1], concurrency: 16, failing: ["a", "b"], known: ["a", "b", "up"]) == (1, ["a", "up"]))
        #expect(WebhookService.probe(inFlight: ["a": 1, "b": 1], concurrency: 16, failing: ["a", "b"], known: ["a", "b"]).limit == 0)
        #expect(WebhookService.probe(inFlight: ["up": 16], concurrency: 16, failing: ["a"], known: ["a", "up"]).limit == 0)
        // Two failing receivers never hold more than one slot each, whatever the concurrency.
        for concurrency in 1...8 {
            var inFlight: [String: Int] = [:]
            for _ in 0..<4 {
                let probe = WebhookService.probe(inFlight: inFlight, concurrency: concurrency, failing: ["a", "b"], known: ["a", "b"])
                for name in ["a", "b"].prefix(probe.limit) where !probe.excluding.contains(name) { inFlight[name, default: 0] += 1 }
                #expect(inFlight.values.allSatisfy { $0 <= 1 } && inFlight.values.reduce(0, +) <= concurrency)
            }
        }
    }
}

/// Look-ups held until ``release()``, whatever cancels their tasks.
final class ParkedLookUps: Sendable {
    private let parked = Mutex<(continuations: [CheckedContinuation<Void, Never>], released: Bool)>(([], false))

    func park(_ continuation: CheckedContinuation<Void, Never>) {
        let released = parked.withLock { state -> Bool in
            if !state.released { state.continuations.append(continuation) }
            return state.released
        }
        if released { continuation.resume() }
    }

    func release() {
        let continuations = parked.withLock { state in
            state.released = true
            defer { state.continuations = [] }
            return state.continuations
        }
        continuations.forEach { $0.resume() }
    }
}
