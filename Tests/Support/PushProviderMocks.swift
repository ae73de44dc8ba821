import Crypto
import _CryptoExtras
import Foundation
import HTTPTypes
package import Hummingbird
package import HummingbirdCore
import HummingbirdHTTP2
import JWTKit
package import NIOSSL
import Synchronization
import SwiftASN1
package import SyncGateWire
import X509

/// Milliseconds since the epoch that move only when a test moves them: the push clients' clock
/// and the mocks' (token ages, expiries). A clock that follows the wall instead is for mocks
/// whose clients (a nudger's) read the real time.
package final class ManualWallClock: Sendable {
    /// The time, or with `followsWall` the offset added to the wall's.
    private let value: Mutex<Int64>
    private let followsWall: Bool

    package init(_ start: Int64 = 1_800_000_000_000) {
        value = Mutex(start)
        followsWall = false
    }

    private init(offset: Int64) {
        value = Mutex(offset)
        followsWall = true
    }

    /// The wall's time, moved on by ``advance(minutes:)``.
    package static func wall() -> ManualWallClock { ManualWallClock(offset: 0) }

    package func now() -> Int64 {
        let value = value.withLock { $0 }
        return followsWall ? Timestamp.now().millisecondsSinceEpoch + value : value
    }

    package func advance(minutes: Int64) { value.withLock { $0 += minutes * 60_000 } }
}

/// A certificate authority made for one test run, and a server certificate it signed for
/// 127.0.0.1: the mocks speak TLS as the real services do, and the clients trust only this CA.
package struct TestCertificateAuthority: Sendable {
    package let server: TLSConfiguration
    package let client: TLSConfiguration

    package init() throws {
        let caKey = P256.Signing.PrivateKey()
        let caName = try DistinguishedName { CommonName("SyncGate test CA") }
        let start = Date(timeIntervalSinceNow: -3600)
        let end = Date(timeIntervalSinceNow: 86_400)
        let ca = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(caKey.publicKey), notValidBefore: start, notValidAfter: end,
            issuer: caName, subject: caName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true))
            },
            issuerPrivateKey: .init(caKey)
        )
        let leafKey = P256.Signing.PrivateKey()
        let leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey), notValidBefore: start, notValidAfter: end,
            issuer: caName, subject: try DistinguishedName { CommonName("127.0.0.1") }, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                SubjectAlternativeNames([.ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])), .dnsName("localhost")])
                try ExtendedKeyUsage([.serverAuth])
            },
            issuerPrivateKey: .init(caKey)
        )
        let leafCertificate = try NIOSSLCertificate(bytes: Array(try leaf.serializeAsPEM().pemString.utf8), format: .pem)
        let leafPrivateKey = try NIOSSLPrivateKey(bytes: Array(leafKey.pemRepresentation.utf8), format: .pem)
        server = TLSConfiguration.makeServerConfiguration(certificateChain: [.certificate(leafCertificate)], privateKey: .privateKey(leafPrivateKey))
        var client = TLSConfiguration.makeClientConfiguration()
        client.trustRoots = .certificates([try NIOSSLCertificate(bytes: Array(try ca.serializeAsPEM().pemString.utf8), format: .pem)])
        self.client = client
    }

    /// An HTTP/2 server (HTTP/1.1 for clients that do not offer h2 in ALPN) with this CA's certificate.
    package func http2Server() throws -> HTTPServerBuilder {
        try .http2Upgrade(tlsConfiguration: server)
    }
}

/// What a mock answers a request it found valid: a status and the provider's error name.
package struct ScriptedAnswer: Sendable {
    package var status: Int
    package var reason: String?
    package var retryAfter: Int?

    package init(_ status: Int, _ reason: String? = nil, retryAfter: Int? = nil) {
        self.status = status
        self.reason = reason
        self.retryAfter = retryAfter
    }
}

/// Apple's push service for tests: checks what APNs checks of a background push with token-based
/// authentication, records what it accepted, and answers scripted failures per device.
/// https://developer.apple.com/documentation/usernotifications/sending-notification-requests-to-apns
package final class APNsMock: Sendable {
    package struct Received: Sendable {
        package var deviceToken: String
        package var payload: JSONValue
        package var collapseID: String?
    }

    package let teamID = "TEAM123456"
    package let keyID = "KEY7890ABC"
    package let topic = "com.example.timetracker"
    /// The team's `.p8` key, as Apple issues it (PKCS#8 PEM).
    package let keyPEM: String
    let verifier = JWTKeyCollection()
    let clock: ManualWallClock

    struct State {
        var received: [Received] = []
        var refused: [(status: Int, reason: String)] = []
        var scripts: [String: [ScriptedAnswer]] = [:]
        /// Provider tokens in the order they were first seen, with when.
        var tokens: [(token: String, at: Int64)] = []
        var lastRefusedAsExpired: String?
        var http1Requests = 0
        var hold: TestGate?
        var arrivals = 0
    }

    private let state = Mutex(State())

    package init(clock: ManualWallClock) async throws {
        let key = P256.Signing.PrivateKey()
        keyPEM = key.pemRepresentation
        self.clock = clock
        await verifier.add(ecdsa: try ES256PublicKey(pem: key.publicKey.pemRepresentation), kid: JWKIdentifier(string: keyID))
    }

    package var received: [Received] { state.withLock { $0.received } }
    /// Requests refused by a check, with APNs' reason.
    package var refused: [(status: Int, reason: String)] { state.withLock { $0.refused } }
    /// Distinct provider tokens seen.
    package var tokenCount: Int { state.withLock { $0.tokens.count } }
    package var http1Requests: Int { state.withLock { $0.http1Requests } }
    /// Requests that arrived (whatever became of them).
    package var arrivals: Int { state.withLock { $0.arrivals } }

    /// Requests from now on wait for `gate` before they are answered (`nil`: they do not).
    package func hold(until gate: TestGate?) {
        state.withLock { $0.hold = gate }
    }

    /// The next answers for `deviceToken`, one per request, before it is accepted again.
    package func script(_ deviceToken: String, _ answers: ScriptedAnswer...) {
        state.withLock { $0.scripts[deviceToken, default: []] += answers }
    }

    /// Apple's claims, defined apart from the client's: a claim the client misnames fails here.
    struct Claims: JWTPayload {
        var iss: String
        var iat: Int64
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    package var router: Router<BasicRequestContext> {
        let router = Router()
        router.post("3/device/:token") { request, context -> Response in
            let deviceToken = context.parameters.get("token") ?? ""
            let body = Array(try await request.body.collect(upTo: 1 << 16).readableBytesView)
            let gate = self.state.withLock { state in
                state.arrivals += 1
                return state.hold
            }
            if let gate { try await gate.wait() }
            let now = self.clock.now()
            // Only HTTP/2 carries the :scheme pseudo-header; Hummingbird's HTTP/1.1 path says "http".
            guard request.head.scheme == "https" else {
                self.state.withLock { $0.http1Requests += 1 }
                return Self.answer(ScriptedAnswer(505, "HTTP/2 required"))
            }
            guard let authorization = request.headers[.authorization], authorization.hasPrefix("bearer ") else {
                return self.refuse(403, "MissingProviderToken")
            }
            let jwt = String(authorization.dropFirst("bearer ".count))
            guard let claims = try? await self.verifier.verify(jwt, as: Claims.self), claims.iss == self.teamID else {
                return self.refuse(403, "InvalidProviderToken")
            }
            if claims.iat * 1000 > now + 60_000 { return self.refuse(403, "InvalidProviderToken") }
            if claims.iat * 1000 + 3_600_000 < now {
                self.state.withLock { $0.lastRefusedAsExpired = jwt }
                return self.refuse(403, "ExpiredProviderToken")
            }
            let tooSoon: Bool = self.state.withLock { state in
                guard !state.tokens.contains(where: { $0.token == jwt }) else { return false }
                // Apple refuses a new token sooner than 20 minutes after the last, unless it
                // called that one expired.
                if let last = state.tokens.last, now - last.at < 20 * 60_000, state.lastRefusedAsExpired != last.token { return true }
                state.tokens.append((jwt, now))
                return false
            }
            if tooSoon { return self.refuse(429, "TooManyProviderTokenUpdates") }
            let field = { (name: String) in request.headers[HTTPField.Name(name)!] }
            guard field("apns-topic") == self.topic else { return self.refuse(400, "DeviceTokenNotForTopic") }
            guard field("apns-push-type") == "background" else { return self.refuse(400, "InvalidPushType") }
            guard field("apns-priority") == "5" else { return self.refuse(400, "BadPriority") }
            guard let expiration = field("apns-expiration").flatMap({ Int64($0) }), expiration >= 0 else { return self.refuse(400, "BadExpirationDate") }
            if let collapse = field("apns-collapse-id"), collapse.utf8.count > 64 { return self.refuse(400, "BadCollapseId") }
            guard deviceToken.utf8.count >= 64, deviceToken.allSatisfy(\.isHexDigit) else { return self.refuse(400, "BadDeviceToken") }
            guard body.count <= 4096 else { return self.refuse(413, "PayloadTooLarge") }
            guard let payload = try? JSONParser().parse(body), let aps = payload["aps"]?.objectValue else { return self.refuse(400, "PayloadEmpty") }
            // A background push wakes the app silently: content-available and nothing to show.
            guard aps["content-available"]?.intValue == 1, aps["alert"] == nil, aps["sound"] == nil, aps["badge"] == nil else {
                return self.refuse(400, "BadPayload")
            }
            return self.state.withLock { state in
                if var answers = state.scripts[deviceToken], !answers.isEmpty {
                    let answer = answers.removeFirst()
                    state.scripts[deviceToken] = answers
                    if answer.reason == "ExpiredProviderToken" { state.lastRefusedAsExpired = jwt }
                    return Self.answer(answer)
                }
                state.received.append(Received(deviceToken: deviceToken, payload: payload, collapseID: field("apns-collapse-id")))
                var response = Response(status: .ok)
                response.headers[HTTPField.Name("apns-id")!] = UUID().uuidString
                return response
            }
        }
        return router
    }

    private func refuse(_ status: Int, _ reason: String) -> Response {
        state.withLock { $0.refused.append((status, reason)) }
        return Self.answer(ScriptedAnswer(status, reason))
    }

    static func answer(_ answer: ScriptedAnswer) -> Response {
        var body: JSONObject = [:]
        if let reason = answer.reason { body["reason"] = .string(reason) }
        var response = Response(
            status: HTTPResponse.Status(code: answer.status), headers: [.contentType: "application/json"],
            body: .init(byteBuffer: .init(bytes: JSONValue.object(body).serializedBytes()))
        )
        if let seconds = answer.retryAfter { response.headers[.retryAfter] = "\(seconds)" }
        return response
    }
}

/// Google's OAuth token endpoint and FCM HTTP v1 for tests: checks the service account's RS256
/// grant and the data-only message as Google does, records what it accepted, and answers scripted
/// failures per registration token.
/// https://developers.google.com/identity/protocols/oauth2/service-account#httprest
package final class FCMMock: Sendable {
    package struct Received: Sendable {
        package var registration: String
        package var data: JSONObject
        package var priority: String?
        package var android: JSONObject?
    }

    package let projectID = "pantry-test"
    package let clientEmail = "syncgate@pantry-test.iam.gserviceaccount.com"
    package let privateKeyID = "0123456789abcdef"
    let privateKeyPEM: String
    let verifier = JWTKeyCollection()
    let clock: ManualWallClock
    /// Seconds an access token lives.
    package let tokenLifetime: Int64 = 3599

    struct State {
        var received: [Received] = []
        var refused: [(status: Int, reason: String)] = []
        var scripts: [String: [ScriptedAnswer]] = [:]
        var accessTokens: [String: Int64] = [:]  // token → expiry (ms)
        var grants = 0
    }

    private let state = Mutex(State())

    package init(clock: ManualWallClock) async throws {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        privateKeyPEM = key.pkcs8PEMRepresentation
        self.clock = clock
        await verifier.add(rsa: try Insecure.RSA.PublicKey(pem: key.publicKey.pemRepresentation), digestAlgorithm: .sha256, kid: JWKIdentifier(string: privateKeyID))
    }

    /// The service account key file as Google issues it, its token endpoint on the mock.
    package func serviceAccountJSON(port: Int) -> String {
        let object: JSONObject = [
            "type": "service_account", "project_id": .string(projectID), "private_key_id": .string(privateKeyID),
            "private_key": .string(privateKeyPEM), "client_email": .string(clientEmail), "client_id": "1234567890",
            "token_uri": .string("https://127.0.0.1:\(port)/token"),
        ]
        return JSONValue.object(object).serialized()
    }

    package var received: [Received] { state.withLock { $0.received } }
    package var refused: [(status: Int, reason: String)] { state.withLock { $0.refused } }
    /// Access tokens granted.
    package var grants: Int { state.withLock { $0.grants } }

    package func script(_ registration: String, _ answers: ScriptedAnswer...) {
        state.withLock { $0.scripts[registration, default: []] += answers }
    }

    /// Google's grant claims, defined apart from the client's: a claim it misnames fails here.
    struct Grant: JWTPayload {
        var iss: String
        var scope: String
        var aud: String
        var iat: Int64
        var exp: Int64
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    package func router(port: @escaping @Sendable () -> Int) -> Router<BasicRequestContext> {
        let router = Router()
        router.post("token") { request, _ -> Response in
            let body = String(decoding: try await request.body.collect(upTo: 1 << 16).readableBytesView, as: UTF8.self)
            var form: [String: String] = [:]
            for pair in body.split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                if parts.count == 2 { form[String(parts[0])] = String(parts[1]).removingPercentEncoding }
            }
            let now = self.clock.now()
            guard request.headers[.contentType] == "application/x-www-form-urlencoded",
                form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer", let assertion = form["assertion"]
            else { return Self.oauthError(400, "unsupported_grant_type") }
            guard let grant = try? await self.verifier.verify(assertion, as: Grant.self), grant.iss == self.clientEmail,
                grant.scope.split(separator: " ").contains("https://www.googleapis.com/auth/firebase.messaging"),
                grant.aud == "https://127.0.0.1:\(port())/token"
            else { return Self.oauthError(400, "invalid_grant") }
            // Google: issued no later than now, expiring at most an hour after it was issued.
            guard grant.exp > grant.iat, grant.exp - grant.iat <= 3600, grant.iat * 1000 <= now + 60_000, grant.exp * 1000 > now else {
                return Self.oauthError(400, "invalid_grant")
            }
            let token = "ya29." + UUID().uuidString
            self.state.withLock {
                $0.accessTokens[token] = now + self.tokenLifetime * 1000
                $0.grants += 1
            }
            let answer: JSONValue = ["access_token": .string(token), "expires_in": .int(self.tokenLifetime), "token_type": "Bearer"]
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: .init(bytes: answer.serializedBytes())))
        }
        router.post("v1/projects/:project/messages:send") { request, context -> Response in
            let body = Array(try await request.body.collect(upTo: 1 << 16).readableBytesView)
            let now = self.clock.now()
            let bearer = request.headers[.authorization].flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
            let valid = self.state.withLock { state in bearer.flatMap { state.accessTokens[$0] }.map { $0 > now } ?? false }
            guard valid else { return self.refuse(401, "UNAUTHENTICATED", code: nil) }
            guard context.parameters.get("project") == self.projectID else { return self.refuse(403, "PERMISSION_DENIED", code: "SENDER_ID_MISMATCH") }
            guard let message = (try? JSONParser().parse(body))?["message"]?.objectValue,
                let registration = message["token"]?.stringValue, !registration.isEmpty,
                let data = message["data"]?.objectValue,
                // FCM's data map carries only strings; a nudge is data-only (no notification).
                data.values.allSatisfy({ $0.stringValue != nil }), message["notification"] == nil
            else { return self.refuse(400, "INVALID_ARGUMENT", code: "INVALID_ARGUMENT") }
            // FCM registration tokens are URL-safe base64 with `:` separators; anything else is
            // refused as an invalid argument naming the field.
            guard registration.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || ":_-".unicodeScalars.contains($0)) }) else {
                return self.refuse(400, "INVALID_ARGUMENT", code: "INVALID_ARGUMENT", field: "message.token")
            }
            let priority = message["android"]?["priority"]?.stringValue
            if let priority, !["high", "normal", "HIGH", "NORMAL"].contains(priority) { return self.refuse(400, "INVALID_ARGUMENT", code: "INVALID_ARGUMENT") }
            // FCM's `ttl` is a duration in seconds, "3.5s" style, at most 4 weeks.
            if let ttl = message["android"]?["ttl"] {
                guard let text = ttl.stringValue, text.hasSuffix("s"), let seconds = Double(text.dropLast()), (0...2_419_200).contains(seconds) else {
                    return self.refuse(400, "INVALID_ARGUMENT", code: "INVALID_ARGUMENT")
                }
            }
            let android = message["android"]?.objectValue
            return self.state.withLock { state in
                if var answers = state.scripts[registration], !answers.isEmpty {
                    let answer = answers.removeFirst()
                    state.scripts[registration] = answers
                    return Self.fcmError(answer)
                }
                state.received.append(Received(registration: registration, data: data, priority: priority, android: android))
                let name: JSONValue = ["name": .string("projects/\(self.projectID)/messages/\(state.received.count)")]
                return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: .init(bytes: name.serializedBytes())))
            }
        }
        return router
    }

    private func refuse(_ status: Int, _ reason: String, code: String?, field: String? = nil) -> Response {
        state.withLock { $0.refused.append((status, reason)) }
        return Self.fcmError(ScriptedAnswer(status, code ?? reason), field: field)
    }

    static func oauthError(_ status: Int, _ error: String) -> Response {
        let body: JSONValue = ["error": .string(error)]
        return Response(status: HTTPResponse.Status(code: status), headers: [.contentType: "application/json"], body: .init(byteBuffer: .init(bytes: body.serializedBytes())))
    }

    /// FCM's error body: a gRPC status and, in a detail, the FCM error code; with `field`, a
    /// `google.rpc.BadRequest` detail naming the invalid field.
    static func fcmError(_ answer: ScriptedAnswer, field: String? = nil) -> Response {
        let code = answer.reason ?? "INTERNAL"
        let grpc = ["UNREGISTERED": "NOT_FOUND", "QUOTA_EXCEEDED": "RESOURCE_EXHAUSTED", "UNAVAILABLE": "UNAVAILABLE", "SENDER_ID_MISMATCH": "PERMISSION_DENIED"][code] ?? code
        var details: [JSONValue] = [["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": .string(code)]]
        if let field {
            details.append(["@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": [["field": .string(field), "description": "invalid"]]])
        }
        let body: JSONValue = [
            "error": ["code": .int(Int64(answer.status)), "message": .string(code), "status": .string(grpc), "details": .array(details)]
        ]
        var response = Response(
            status: HTTPResponse.Status(code: answer.status), headers: [.contentType: "application/json"],
            body: .init(byteBuffer: .init(bytes: body.serializedBytes()))
        )
        if let seconds = answer.retryAfter { response.headers[.retryAfter] = "\(seconds)" }
        return response
    }
}

/// A mock's port, known once it listens (its router needs it for the URLs it checks).
package final class PortBox: Sendable {
    private let port = Mutex(0)

    package init() {}

    package var value: Int {
        get { port.withLock { $0 } }
        set { port.withLock { $0 = newValue } }
    }
}
