import AsyncHTTPClient
import Crypto
import Foundation
import Hummingbird
import NIOCore
import NIOHTTP1
import Synchronization
import _CryptoExtras
@testable import SyncGatePush
import SyncGateTestSupport
import SyncGateWire
import Testing

/// The push clients' decisions (answers, tokens, retries, payloads) without I/O, and the clients
/// against local mocks of APNs and FCM that check what Apple and Google check.
@Suite struct PushDecisionTests {
    static func body(_ object: JSONValue) -> [UInt8] { object.serializedBytes() }

    @Test(arguments: [
        (200, nil, PushOutcome.sent),
        (410, "Unregistered", .unregistered(reason: "Unregistered")),
        (410, "ExpiredToken", .unregistered(reason: "ExpiredToken")),
        (400, "BadDeviceToken", .unregistered(reason: "BadDeviceToken")),
        (400, "DeviceTokenNotForTopic", .unregistered(reason: "DeviceTokenNotForTopic")),
        (403, "ExpiredProviderToken", .renewCredentials(reason: "ExpiredProviderToken")),
        (403, "InvalidProviderToken", .rejected(reason: "403 InvalidProviderToken")),
        (403, "MissingProviderToken", .rejected(reason: "403 MissingProviderToken")),
        (400, "BadTopic", .rejected(reason: "400 BadTopic")),
        (400, "PayloadEmpty", .rejected(reason: "400 PayloadEmpty")),
        (413, "PayloadTooLarge", .rejected(reason: "413 PayloadTooLarge")),
        (429, "TooManyRequests", .retry(reason: "TooManyRequests", after: nil)),
        (429, "TooManyProviderTokenUpdates", .retry(reason: "TooManyProviderTokenUpdates", after: nil)),
        (500, "InternalServerError", .retry(reason: "InternalServerError", after: nil)),
        (503, "ServiceUnavailable", .retry(reason: "ServiceUnavailable", after: nil)),
        (502, nil, .retry(reason: "HTTP 502", after: nil)),
    ] as [(Int, String?, PushOutcome)])
    func apnsAnswers(status: Int, reason: String?, expected: PushOutcome) {
        let body = reason.map { Self.body(["reason": .string($0)]) } ?? []
        #expect(PushOutcome.apns(status: status, body: body, retryAfter: nil) == expected)
    }

    @Test func apnsRetryAfterAndUnreadableBodies() {
        #expect(PushOutcome.apns(status: 429, body: Self.body(["reason": "TooManyRequests"]), retryAfter: "30") == .retry(reason: "TooManyRequests", after: 30))
        // A 5xx with Retry-After is the whole service's: the provider is left alone until then.
        #expect(PushOutcome.apns(status: 503, body: Array("<html>".utf8), retryAfter: " 5 ") == .providerBusy(reason: "HTTP 503", after: 5))
        #expect(PushOutcome.apns(status: 500, body: Self.body(["reason": "InternalServerError"]), retryAfter: "120") == .providerBusy(reason: "InternalServerError", after: 120))
        #expect(PushOutcome.apns(status: 503, body: [], retryAfter: "Wed, 21 Oct 2026 07:28:00 GMT") == .retry(reason: "HTTP 503", after: nil))
        #expect(PushOutcome.apns(status: 503, body: [], retryAfter: "-4") == .retry(reason: "HTTP 503", after: nil))
        #expect(PushOutcome.apns(status: 404, body: Array("not json".utf8), retryAfter: nil) == .rejected(reason: "404 HTTP 404"))
    }

    static func fcmBody(status: String, code: String?) -> [UInt8] {
        var error: JSONObject = ["code": 400, "message": "m", "status": .string(status)]
        if let code { error["details"] = [["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": .string(code)]] }
        return body(["error": .object(error)])
    }

    @Test(arguments: [
        (200, "", nil, PushOutcome.sent),
        (404, "NOT_FOUND", "UNREGISTERED", .unregistered(reason: "UNREGISTERED")),
        (400, "INVALID_ARGUMENT", "UNREGISTERED", .unregistered(reason: "UNREGISTERED")),
        (403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", .unregistered(reason: "SENDER_ID_MISMATCH")),
        (400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", .rejected(reason: "400 INVALID_ARGUMENT")),
        (401, "UNAUTHENTICATED", nil, .renewCredentials(reason: "UNAUTHENTICATED")),
        (401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR", .renewCredentials(reason: "THIRD_PARTY_AUTH_ERROR")),
        (403, "PERMISSION_DENIED", nil, .rejected(reason: "403 PERMISSION_DENIED")),
        (429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", .retry(reason: "QUOTA_EXCEEDED", after: nil)),
        (500, "INTERNAL", "INTERNAL", .retry(reason: "INTERNAL", after: nil)),
        (503, "UNAVAILABLE", "UNAVAILABLE", .retry(reason: "UNAVAILABLE", after: nil)),
    ] as [(Int, String, String?, PushOutcome)])
    func fcmAnswers(status: Int, grpc: String, code: String?, expected: PushOutcome) {
        let body = status == 200 ? Self.body(["name": "projects/p/messages/1"]) : Self.fcmBody(status: grpc, code: code)
        #expect(PushOutcome.fcm(status: status, body: body, retryAfter: nil) == expected)
    }

    /// FCM's answer to a registration token it cannot read (its documented INVALID_ARGUMENT
    /// "invalid registration"): the registration goes; any other invalid argument is a rejection.
    @Test func fcmInvalidRegistrationTokensUnregister() {
        func body(field: String, type: String = "type.googleapis.com/google.rpc.BadRequest") -> [UInt8] {
            Self.body([
                "error": [
                    "code": 400, "message": "The registration token is not a valid FCM registration token", "status": "INVALID_ARGUMENT",
                    "details": [
                        ["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "INVALID_ARGUMENT"],
                        ["@type": .string(type), "fieldViolations": [["field": .string(field), "description": "d"]]],
                    ],
                ]
            ])
        }
        #expect(PushOutcome.fcm(status: 400, body: body(field: "message.token"), retryAfter: nil) == .unregistered(reason: "INVALID_ARGUMENT message.token"))
        #expect(PushOutcome.fcm(status: 400, body: body(field: "message.android.ttl"), retryAfter: nil) == .rejected(reason: "400 INVALID_ARGUMENT"))
        #expect(PushOutcome.fcm(status: 400, body: body(field: "message.token", type: "type.googleapis.com/google.rpc.Help"), retryAfter: nil) == .rejected(reason: "400 INVALID_ARGUMENT"))
        #expect(PushOutcome.fcm(status: 500, body: body(field: "message.token"), retryAfter: nil) == .retry(reason: "INVALID_ARGUMENT", after: nil))
    }

    @Test func fcmRetryAfterAndUnreadableBodies() {
        #expect(PushOutcome.fcm(status: 429, body: Self.fcmBody(status: "RESOURCE_EXHAUSTED", code: "QUOTA_EXCEEDED"), retryAfter: "60") == .retry(reason: "QUOTA_EXCEEDED", after: 60))
        #expect(PushOutcome.fcm(status: 502, body: Array("bad gateway".utf8), retryAfter: nil) == .retry(reason: "HTTP 502", after: nil))
        #expect(PushOutcome.fcm(status: 404, body: [], retryAfter: nil) == .rejected(reason: "404 HTTP 404"))
        // A 5xx with Retry-After holds the provider; a 429's may be one device's quota: only its nudge waits.
        #expect(PushOutcome.fcm(status: 503, body: Self.fcmBody(status: "UNAVAILABLE", code: "UNAVAILABLE"), retryAfter: "30") == .providerBusy(reason: "UNAVAILABLE", after: 30))
        #expect(PushOutcome.fcm(status: 503, body: Self.fcmBody(status: "UNAVAILABLE", code: "UNAVAILABLE"), retryAfter: "soon") == .retry(reason: "UNAVAILABLE", after: nil))
    }

    @Test func providerTokensAreReusedUntilTheirRenewal() {
        let apns = ProviderToken(value: "t", issuedAt: 1_000_000, renewAt: 1_000_000 + ProviderToken.apnsLifetime)
        #expect(apns.usable(at: 1_000_000))
        #expect(apns.usable(at: 1_000_000 + 49 * 60_000))
        #expect(!apns.usable(at: 1_000_000 + 50 * 60_000))
        // A clock set back before the token was issued: a new one.
        #expect(!apns.usable(at: 999_999))
        // Inside Apple's window: renewed no sooner than 20 minutes, no later than 60.
        #expect(ProviderToken.apnsLifetime >= 20 * 60_000 && ProviderToken.apnsLifetime < 60 * 60_000)
        #expect(ProviderToken.fcmRenewal(issuedAt: 0, expiresInSeconds: 3599) == 3299 * 1000)
        #expect(ProviderToken.fcmRenewal(issuedAt: 0, expiresInSeconds: 100) == 60 * 1000)
        #expect(ProviderToken.fcmRenewal(issuedAt: 0, expiresInSeconds: -5) == 60 * 1000)
    }

    @Test func retriesBackOffWithJitterWithinBounds() {
        let policy = PushRetryPolicy()
        #expect(policy.delay(afterAttempt: 1, retryAfterSeconds: nil, random: 0.999_999)! <= 1000)
        #expect(policy.delay(afterAttempt: 3, retryAfterSeconds: nil, random: 1) == 4000)
        #expect(policy.delay(afterAttempt: 3, retryAfterSeconds: nil, random: 0) == 0)
        #expect(policy.delay(afterAttempt: 3, retryAfterSeconds: nil, random: 0.5) == 2000)
        // Capped, and given up after the last attempt.
        #expect(policy.delay(afterAttempt: 7, retryAfterSeconds: nil, random: 1) == 64_000)
        #expect(policy.delay(afterAttempt: policy.maximumAttempts, retryAfterSeconds: nil, random: 1) == nil)
        #expect(policy.delay(afterAttempt: 0, retryAfterSeconds: nil, random: 1) == nil)
        var long = PushRetryPolicy()
        long.maximumAttempts = 100
        #expect(long.delay(afterAttempt: 99, retryAfterSeconds: nil, random: 1) == long.cap)
        // The provider's Retry-After is a floor, itself capped; huge values do not overflow.
        #expect(policy.delay(afterAttempt: 1, retryAfterSeconds: 30, random: 0) == 30_000)
        #expect(policy.delay(afterAttempt: 1, retryAfterSeconds: Int64.max, random: 0) == policy.retryAfterCap)
        #expect(policy.delay(afterAttempt: 1, retryAfterSeconds: nil, random: 7) == 1000)
        #expect(policy.delay(afterAttempt: 1, retryAfterSeconds: nil, random: -1) == 0)
    }

    @Test func payloadsCarryTheAdvancedScopesWithinAPNsLimit() throws {
        let apns = PushAddress.apns(token: String(repeating: "ab", count: 32), topic: "com.example.app", environment: .production)
        let nudge = PushNudge(address: apns, scopes: ["user", "household:home"])
        #expect(String(decoding: nudge.apnsPayload(), as: UTF8.self) == #"{"aps":{"content-available":1},"scopes":["user","household:home"],"type":"sync_nudge"}"#)
        #expect(nudge.fcmData() == ["type": "sync_nudge", "scopes": #"["user","household:home"]"#])
        // Too many households to list: the nudge says "sync everything", and stays under 4 KB.
        let crowded = PushNudge(address: apns, scopes: (0..<400).map { "household:h\($0)" })
        let payload = try JSONParser().parse(crowded.apnsPayload())
        #expect(payload["scopes"] == nil && payload["type"] == "sync_nudge")
        #expect(crowded.apnsPayload().count <= 4096 && crowded.fcmData()["scopes"] == nil)
        let full = PushNudge(address: apns, scopes: (0..<200).map { "household:\($0)" })
        #expect(full.apnsPayload().count <= 4096)
    }

    @Test func credentialsAreCheckedWhenRead() throws {
        #expect(throws: PushCredentialsError.self) { try APNsCredentials(keyPEM: "not a key", keyID: "K", teamID: "T") }
        let pem = P256.Signing.PrivateKey().pemRepresentation
        #expect(throws: PushCredentialsError.self) { try APNsCredentials(keyPEM: pem, keyID: "", teamID: "T") }
        _ = try APNsCredentials(keyPEM: pem, keyID: "K", teamID: "T")
        #expect(throws: PushCredentialsError(description: "the FCM service account key is not a JSON object")) { try FCMServiceAccount(json: "[]") }
        #expect(throws: PushCredentialsError(description: "the FCM service account key has no client_email")) {
            try FCMServiceAccount(json: #"{"project_id":"p","private_key_id":"k","token_uri":"https://t","private_key":"x"}"#)
        }
        #expect(throws: PushCredentialsError(description: "the FCM service account's private_key is not a PEM RSA private key")) {
            try FCMServiceAccount(json: #"{"project_id":"p","client_email":"e","private_key_id":"k","token_uri":"https://t","private_key":"x"}"#)
        }
    }
}

@Suite struct PushProviderTests {
    static let device = String(repeating: "0f", count: 32)

    /// An APNs client and its mock on 127.0.0.1 over TLS, sharing `clock` unless `skew` sets the
    /// client's apart.
    static func withAPNs(
        clock: ManualWallClock = ManualWallClock(), skew: Int64 = 0, keyPEM: String? = nil,
        _ body: @Sendable (APNsClient, APNsMock) async throws -> Void
    ) async throws {
        let authority = try TestCertificateAuthority()
        let mock = try await APNsMock(clock: clock)
        let http = PushHTTPClient.make(timeout: .seconds(60), tls: authority.client)
        do {
            try await withTestHTTPServer(mock.router, server: try authority.http2Server()) { port in
                let credentials = try APNsCredentials(keyPEM: keyPEM ?? mock.keyPEM, keyID: mock.keyID, teamID: mock.teamID)
                let client = await APNsClient(
                    credentials: credentials, http: http, timeout: .seconds(60), baseURL: { _ in "https://127.0.0.1:\(port)" },
                    now: { clock.now() + skew }
                )
                try await body(client, mock)
            }
        } catch {
            try await http.shutdown()
            throw error
        }
        try await http.shutdown()
    }

    static func nudge(_ token: String = device, topic: String = "com.example.timetracker") -> PushNudge {
        PushNudge(address: .apns(token: token, topic: topic, environment: .sandbox), scopes: ["user"])
    }

    @Test func apnsBackgroundPushOverHTTP2WithAVerifiedProviderToken() async throws {
        try await Self.withAPNs { client, mock in
            #expect(await client.send(Self.nudge()) == .sent)
            #expect(mock.refused.isEmpty && mock.http1Requests == 0)
            let received = try #require(mock.received.first)
            #expect(received.deviceToken == Self.device && received.collapseID == "sync_nudge")
            #expect(received.payload == ["aps": ["content-available": 1], "type": "sync_nudge", "scopes": ["user"]])
        }
    }

    @Test func apnsProviderTokenIsReusedFiftyMinutesThenRenewed() async throws {
        let clock = ManualWallClock()
        try await Self.withAPNs(clock: clock) { client, mock in
            #expect(await client.send(Self.nudge()) == .sent)
            clock.advance(minutes: 49)
            #expect(await client.send(Self.nudge()) == .sent)
            #expect(mock.tokenCount == 1)
            clock.advance(minutes: 2)
            #expect(await client.send(Self.nudge()) == .sent)
            #expect(mock.tokenCount == 2 && mock.refused.isEmpty && mock.received.count == 3)
        }
    }

    @Test func concurrentSendsShareOneProviderToken() async throws {
        try await Self.withAPNs { client, mock in
            let outcomes = await withTaskGroup(of: PushOutcome.self) { group in
                for _ in 0..<20 { group.addTask { await client.send(Self.nudge()) } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            #expect(outcomes.allSatisfy { $0 == .sent } && mock.tokenCount == 1 && mock.refused.isEmpty)
        }
        try await Self.withFCM { client, mock in
            let outcomes = await withTaskGroup(of: PushOutcome.self) { group in
                for index in 0..<20 { group.addTask { await client.send(Self.fcm("fcm-\(index)")) } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            #expect(outcomes.allSatisfy { $0 == .sent } && mock.grants == 1)
        }
    }

    @Test func apnsFailuresAreClassified() async throws {
        try await Self.withAPNs { client, mock in
            mock.script(Self.device, ScriptedAnswer(410, "Unregistered"), ScriptedAnswer(429, "TooManyRequests"), ScriptedAnswer(503, "ServiceUnavailable", retryAfter: 7))
            #expect(await client.send(Self.nudge()) == .unregistered(reason: "Unregistered"))
            #expect(await client.send(Self.nudge()) == .retry(reason: "TooManyRequests", after: nil))
            #expect(await client.send(Self.nudge()) == .providerBusy(reason: "ServiceUnavailable", after: 7))
            #expect(await client.send(Self.nudge()) == .sent)
            // The mock's own checks, as APNs makes them.
            #expect(await client.send(Self.nudge("not-hex")) == .unregistered(reason: "BadDeviceToken"))
            #expect(await client.send(Self.nudge(topic: "com.other.app")) == .unregistered(reason: "DeviceTokenNotForTopic"))
            #expect(mock.received.count == 1)
        }
    }

    @Test func apnsExpiredProviderTokenIsRenewedOnce() async throws {
        try await Self.withAPNs { client, mock in
            #expect(await client.send(Self.nudge()) == .sent)
            mock.script(Self.device, ScriptedAnswer(403, "ExpiredProviderToken"))
            #expect(await client.send(Self.nudge()) == .sent)
            #expect(mock.tokenCount == 2 && mock.received.count == 2)
        }
        // A clock an hour behind the provider's: every token it signs is expired at once, and a
        // new one does not help; the nudge is dropped rather than retried for ever.
        try await Self.withAPNs(skew: -61 * 60_000) { client, mock in
            #expect(await client.send(Self.nudge()) == .rejected(reason: "403 ExpiredProviderToken with a new token"))
            #expect(mock.refused.map(\.reason) == ["ExpiredProviderToken", "ExpiredProviderToken"] && mock.received.isEmpty)
        }
    }

    @Test func apnsRefusesAKeyItDoesNotKnow() async throws {
        try await Self.withAPNs(keyPEM: P256.Signing.PrivateKey().pemRepresentation) { client, mock in
            #expect(await client.send(Self.nudge()) == .rejected(reason: "403 InvalidProviderToken"))
            #expect(mock.received.isEmpty)
        }
    }

    /// An answer whose body trickles in a byte at a time (each within the read timeout) is given
    /// up at the exchange's timeout: AsyncHTTPClient's own deadline ends with the head.
    @Test func aTricklingAnswerEndsAtTheTimeout() async throws {
        let router = Router()
        router.post("slow") { _, _ in
            Response(status: .ok, body: ResponseBody { writer in
                while !Task.isCancelled {
                    try await writer.write(ByteBuffer(string: " "))
                    try await Task.sleep(for: .milliseconds(100))
                }
                try await writer.finish(nil)
            })
        }
        // A read timeout (the exchange's timeout) far above the trickle's 100 ms gaps, even on a
        // busy machine.
        let http = PushHTTPClient.make(timeout: .seconds(3))
        let outcome: String
        do {
            outcome = try await withTestHTTPServer(router) { port in
                var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/slow")
                request.method = .POST
                let prepared = request
                // The hang guard is the test's bound; a body of 16 KiB at 10 bytes a second is 27 minutes.
                return try await withThrowingTaskGroup(of: String.self) { group in
                    group.addTask {
                        do {
                            _ = try await http.exchange(prepared, timeout: .seconds(3))
                            return "answered"
                        } catch let error as HTTPClientError where error == .deadlineExceeded {
                            return "deadline"
                        } catch {
                            return "\(error)"
                        }
                    }
                    group.addTask {
                        try await Task.sleep(for: hangGuard)
                        return "still reading at the hang guard"
                    }
                    defer { group.cancelAll() }
                    return try await group.next() ?? "-"
                }
            }
        } catch {
            try await http.shutdown()
            throw error
        }
        try await http.shutdown()
        #expect(outcome == "deadline")
    }

    @Test func anUnreachableProviderIsRetried() async throws {
        let authority = try TestCertificateAuthority()
        let mock = try await APNsMock(clock: ManualWallClock())
        let http = PushHTTPClient.make(timeout: .seconds(60), tls: authority.client)
        // A port that was listening and is closed again: connection refused.
        let port = try await withTestHTTPServer(mock.router, server: try authority.http2Server()) { $0 }
        let client = await APNsClient(
            credentials: try APNsCredentials(keyPEM: mock.keyPEM, keyID: mock.keyID, teamID: mock.teamID), http: http,
            baseURL: { _ in "https://127.0.0.1:\(port)" }
        )
        let outcome = await client.send(Self.nudge())
        try await http.shutdown()
        guard case .retry = outcome else {
            Issue.record("expected a retry, got \(outcome)")
            return
        }
    }

    static func withFCM(clock: ManualWallClock = ManualWallClock(), account: (@Sendable (FCMMock, Int) -> String)? = nil, _ body: @Sendable (FCMClient, FCMMock) async throws -> Void) async throws {
        let authority = try TestCertificateAuthority()
        let mock = try await FCMMock(clock: clock)
        let http = PushHTTPClient.make(timeout: .seconds(60), tls: authority.client)
        let port = PortBox()
        do {
            try await withTestHTTPServer(mock.router(port: { port.value }), server: try authority.http2Server()) { bound in
                port.value = bound
                let json = account?(mock, bound) ?? mock.serviceAccountJSON(port: bound)
                let client = await FCMClient(
                    account: try FCMServiceAccount(json: json), http: http, priority: .normal, timeout: .seconds(60),
                    baseURL: "https://127.0.0.1:\(bound)", now: { clock.now() }
                )
                try await body(client, mock)
            }
        } catch {
            try await http.shutdown()
            throw error
        }
        try await http.shutdown()
    }

    static func fcm(_ token: String = "fcm-registration-1") -> PushNudge {
        PushNudge(address: .fcm(token: token), scopes: ["user", "household:home"])
    }

    @Test func aNudgeClaimNeverTakesAProviderPastItsShare() {
        // Every state of 1 to 8 slots: a claim fits the free slots and each provider it may take
        // stays within its share; a provider with room and a free slot is never starved.
        for concurrency in 1...8 {
            let share = max(1, concurrency * 3 / 4)
            for apns in 0...share {
                for fcm in 0...share where apns + fcm <= concurrency {
                    let inFlight: [PushRegistration.Provider: Int] = [.apns: apns, .fcm: fcm]
                    let next = NudgeService.nextClaim(inFlight: inFlight, concurrency: concurrency)
                    let free = concurrency - apns - fcm
                    #expect(next.limit <= free)
                    for provider in next.providers {
                        #expect(inFlight[provider, default: 0] + next.limit <= share, "\(concurrency) \(inFlight) \(next)")
                    }
                    #expect(!next.providers.contains { inFlight[$0, default: 0] >= share })
                    if free > 0, apns < share || fcm < share { #expect(next.limit > 0, "\(concurrency) \(inFlight)") }
                    // A provider's own claim after that: its share, within the free slots.
                    for provider in PushRegistration.Provider.allCases {
                        let room = NudgeService.room(of: provider, inFlight: inFlight, concurrency: concurrency)
                        #expect(room == max(0, min(free, share - inFlight[provider, default: 0])))
                    }
                }
            }
        }
        // Thirty-two slots: a provider that holds 24 leaves the other the remaining 8.
        #expect(NudgeService.nextClaim(inFlight: [.apns: 24], concurrency: 32) == (8, [.fcm]))
        // A held provider is never taken, whatever its room; the other keeps its own.
        for concurrency in 1...8 {
            for held in [[], [PushRegistration.Provider.apns], [.fcm], [.apns, .fcm]] as [Set<PushRegistration.Provider>] {
                let next = NudgeService.nextClaim(inFlight: [:], concurrency: concurrency, held: held)
                #expect(next.providers == Set(PushRegistration.Provider.allCases).subtracting(held))
                #expect(next.limit == (next.providers.isEmpty ? 0 : max(1, concurrency * 3 / 4)))
            }
        }
    }

    @Test func fcmDataMessageWithAnAccessTokenFromTheServiceAccount() async throws {
        let clock = ManualWallClock()
        try await Self.withFCM(clock: clock) { client, mock in
            #expect(await client.send(Self.fcm()) == .sent)
            #expect(await client.send(Self.fcm("fcm-registration-2")) == .sent)
            let received = mock.received
            #expect(received.map(\.registration) == ["fcm-registration-1", "fcm-registration-2"])
            #expect(received.first?.data == ["type": "sync_nudge", "scopes": #"["user","household:home"]"#] && received.first?.priority == "normal")
            // Collapsed and expired as APNs' nudges: an offline device keeps the newest, for an hour.
            #expect(received.first?.android?["collapse_key"] == "sync_nudge" && received.first?.android?["ttl"] == "3600s")
            #expect(mock.grants == 1 && mock.refused.isEmpty)
            // Renewed five minutes before it expires.
            clock.advance(minutes: 54)
            #expect(await client.send(Self.fcm()) == .sent)
            #expect(mock.grants == 1)
            clock.advance(minutes: 2)
            #expect(await client.send(Self.fcm()) == .sent)
            #expect(mock.grants == 2 && mock.refused.isEmpty)
        }
    }

    @Test func fcmFailuresAreClassified() async throws {
        try await Self.withFCM { client, mock in
            mock.script(
                "fcm-registration-1", ScriptedAnswer(404, "UNREGISTERED"), ScriptedAnswer(429, "QUOTA_EXCEEDED", retryAfter: 30),
                ScriptedAnswer(503, "UNAVAILABLE"), ScriptedAnswer(401, "UNAUTHENTICATED")
            )
            #expect(await client.send(Self.fcm()) == .unregistered(reason: "UNREGISTERED"))
            #expect(await client.send(Self.fcm("not a token")) == .unregistered(reason: "INVALID_ARGUMENT message.token"))
            #expect(await client.send(Self.fcm()) == .retry(reason: "QUOTA_EXCEEDED", after: 30))
            #expect(await client.send(Self.fcm()) == .retry(reason: "UNAVAILABLE", after: nil))
            // A 401 asks for a new access token and sends again, once.
            #expect(await client.send(Self.fcm()) == .sent)
            #expect(mock.grants == 2 && mock.received.count == 1)
            #expect(mock.refused.map(\.reason) == ["INVALID_ARGUMENT"])
        }
    }

    @Test func fcmRefusesAServiceAccountItDoesNotKnow() async throws {
        try await Self.withFCM(account: { mock, port in
            // Same account, another key: Google's token endpoint refuses the grant.
            let other = try! _RSA.Signing.PrivateKey(keySize: .bits2048).pkcs8PEMRepresentation
            let json = mock.serviceAccountJSON(port: port)
            var object = try! JSONParser().parse(json).objectValue!
            object["private_key"] = .string(other)
            return JSONValue.object(object).serialized()
        }) { client, mock in
            #expect(await client.send(Self.fcm()) == .rejected(reason: "the token endpoint refused the service account: invalid_grant"))
            #expect(mock.grants == 0 && mock.received.isEmpty)
        }
    }
}
