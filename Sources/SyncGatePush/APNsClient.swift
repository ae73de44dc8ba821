package import AsyncHTTPClient
import JWTKit
import NIOCore
import NIOHTTP1
import SyncGateWire

/// Sends nudges to Apple's push service with token-based authentication: an ES256 JWT signed
/// with the team's key, reused for 50 minutes, over HTTP/2.
package actor APNsClient {
    let credentials: APNsCredentials
    let http: HTTPClient
    let keys = JWTKeyCollection()
    /// The service's base URL per environment; tests point both at a local mock.
    let baseURL: @Sendable (APNsEnvironment) -> String
    let timeout: Duration
    /// Milliseconds since the epoch (a manual clock in tests).
    let now: @Sendable () -> Int64
    private var token: ProviderToken?
    /// The signing under way: sends that find the token due wait for it, rather than each sign
    /// one (APNs refuses a token renewed sooner than 20 minutes after the last).
    private var renewal: Task<ProviderToken, any Error>?

    package init(
        credentials: APNsCredentials, http: HTTPClient, timeout: Duration = .seconds(10),
        baseURL: @escaping @Sendable (APNsEnvironment) -> String = { "https://\($0.host)" },
        now: @escaping @Sendable () -> Int64 = { Timestamp.now().millisecondsSinceEpoch }
    ) async {
        self.credentials = credentials
        self.http = http
        self.timeout = timeout
        self.baseURL = baseURL
        self.now = now
        await keys.add(ecdsa: credentials.key, kid: JWKIdentifier(string: credentials.keyID))
    }

    struct Claims: JWTPayload {
        var iss: String
        var iat: Int64
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    /// The provider token to send, signed anew when it is due or is `failed` (APNs called it
    /// expired; a send that failed with an older one takes the current one).
    func providerToken(replacing failed: String?) async throws -> String {
        let at = now()
        if let token, token.usable(at: at), token.value != failed { return token.value }
        if let renewal { return try await renewal.value.value }
        let (keys, claims, kid) = (keys, Claims(iss: credentials.teamID, iat: at / 1000), JWKIdentifier(string: credentials.keyID))
        let task = Task { ProviderToken(value: try await keys.sign(claims, kid: kid), issuedAt: at, renewAt: at + ProviderToken.apnsLifetime) }
        renewal = task
        defer { renewal = nil }
        let signed = try await task.value
        token = signed
        return signed.value
    }

    package func send(_ nudge: PushNudge) async -> PushOutcome {
        guard case .apns(let deviceToken, let topic, let environment) = nudge.address else {
            return .rejected(reason: "not an APNs address")
        }
        var (outcome, bearer) = await attempt(nudge, deviceToken: deviceToken, topic: topic, environment: environment, replacing: nil)
        if case .renewCredentials = outcome {
            (outcome, _) = await attempt(nudge, deviceToken: deviceToken, topic: topic, environment: environment, replacing: bearer)
            // Refused again with a token just signed: the key or the clock is wrong, not the token's age.
            if case .renewCredentials(let reason) = outcome { outcome = .rejected(reason: "403 \(reason) with a new token") }
        }
        return outcome
    }

    /// One request; its outcome and the provider token it carried.
    private func attempt(
        _ nudge: PushNudge, deviceToken: String, topic: String, environment: APNsEnvironment, replacing failed: String?
    ) async -> (PushOutcome, String?) {
        var bearer: String?
        do {
            let signed = try await providerToken(replacing: failed)
            bearer = signed
            var request = HTTPClientRequest(url: "\(baseURL(environment))/3/device/\(deviceToken)")
            request.method = .POST
            request.headers.add(name: "authorization", value: "bearer \(signed)")
            request.headers.add(name: "apns-push-type", value: "background")
            // Apple requires priority 5 for background pushes.
            request.headers.add(name: "apns-priority", value: "5")
            request.headers.add(name: "apns-topic", value: topic)
            // Kept for an hour while the device is offline; a newer nudge replaces it.
            request.headers.add(name: "apns-expiration", value: "\(now() / 1000 + 3600)")
            request.headers.add(name: "apns-collapse-id", value: "sync_nudge")
            request.headers.add(name: "content-type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: nudge.apnsPayload()))
            let answer = try await http.exchange(request, timeout: timeout)
            return (.apns(status: answer.status, body: answer.body, retryAfter: answer.retryAfter), bearer)
        } catch {
            return (.retry(reason: "\(error)", after: nil), bearer)
        }
    }
}
