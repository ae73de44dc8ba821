package import AsyncHTTPClient
import JWTKit
import NIOCore
import NIOHTTP1
import SyncGateWire

/// FCM's Android delivery priority for data messages: `high` wakes a dozing device at once (and
/// counts against the app's high-priority budget), `normal` may wait for a maintenance window.
package enum FCMPriority: String, Sendable, Hashable, CaseIterable {
    case high
    case normal
}

/// Sends nudges through FCM HTTP v1: the service account signs an RS256 JWT grant, trades it for
/// an OAuth access token (reused until 5 minutes before it expires), and posts data-only messages.
package actor FCMClient {
    let account: FCMServiceAccount
    let http: HTTPClient
    let keys = JWTKeyCollection()
    let priority: FCMPriority
    /// `https://fcm.googleapis.com`; tests point it at a local mock (and the key file's `token_uri` too).
    let baseURL: String
    let timeout: Duration
    let now: @Sendable () -> Int64
    private var token: ProviderToken?
    /// The token request under way: sends that find the token due wait for it.
    private var renewal: Task<Result<ProviderToken, TokenFailure>, Never>?

    static let scope = "https://www.googleapis.com/auth/firebase.messaging"

    package init(
        account: FCMServiceAccount, http: HTTPClient, priority: FCMPriority = .high, timeout: Duration = .seconds(10),
        baseURL: String = "https://fcm.googleapis.com", now: @escaping @Sendable () -> Int64 = { Timestamp.now().millisecondsSinceEpoch }
    ) async {
        self.account = account
        self.http = http
        self.priority = priority
        self.timeout = timeout
        self.baseURL = baseURL
        self.now = now
        await keys.add(rsa: account.key, digestAlgorithm: .sha256, kid: JWKIdentifier(string: account.privateKeyID))
    }

    struct Grant: JWTPayload {
        var iss: String
        var scope: String
        var aud: String
        var iat: Int64
        var exp: Int64
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    enum TokenFailure: Error {
        /// The token endpoint refused the grant: the key is revoked or wrong.
        case refused(String)
        case unavailable(String)
    }

    /// An access token, asked for anew when it is due or is `failed` (FCM answered 401 to it).
    func accessToken(replacing failed: String?) async throws(TokenFailure) -> String {
        let at = now()
        if let token, token.usable(at: at), token.value != failed { return token.value }
        if let renewal { return try await renewal.value.get().value }
        let task = Task { () async -> Result<ProviderToken, TokenFailure> in
            do throws(TokenFailure) {
                return .success(try await self.requestToken(at: at))
            } catch {
                return .failure(error)
            }
        }
        renewal = task
        defer { renewal = nil }
        let fresh = try await task.value.get()
        token = fresh
        return fresh.value
    }

    /// Trades a signed grant for an access token at the service account's token endpoint.
    private func requestToken(at: Int64) async throws(TokenFailure) -> ProviderToken {
        let seconds = at / 1000
        let answer: ProviderAnswer
        do {
            let assertion = try await keys.sign(
                Grant(iss: account.clientEmail, scope: Self.scope, aud: account.tokenURI, iat: seconds, exp: seconds + 3600),
                kid: JWKIdentifier(string: account.privateKeyID)
            )
            var request = HTTPClientRequest(url: account.tokenURI)
            request.method = .POST
            request.headers.add(name: "content-type", value: "application/x-www-form-urlencoded")
            // A JWT is base64url and dots: nothing in it needs form encoding.
            request.body = .bytes(ByteBuffer(string: "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)"))
            answer = try await http.exchange(request, timeout: timeout)
        } catch {
            throw .unavailable("\(error)")
        }
        let object = (try? JSONParser().parse(answer.body))?.objectValue
        guard answer.status == 200, let value = object?["access_token"]?.stringValue, let expiresIn = object?["expires_in"]?.intValue else {
            let reason = object?["error"]?.stringValue ?? "HTTP \(answer.status)"
            if answer.status >= 500 || answer.status == 429 { throw .unavailable("the token endpoint answered \(reason)") }
            throw .refused("the token endpoint refused the service account: \(reason)")
        }
        return ProviderToken(value: value, issuedAt: at, renewAt: ProviderToken.fcmRenewal(issuedAt: at, expiresInSeconds: expiresIn))
    }

    package func send(_ nudge: PushNudge) async -> PushOutcome {
        guard case .fcm(let registration) = nudge.address else { return .rejected(reason: "not an FCM address") }
        var (outcome, bearer) = await attempt(nudge, registration: registration, replacing: nil)
        if case .renewCredentials = outcome {
            (outcome, _) = await attempt(nudge, registration: registration, replacing: bearer)
            if case .renewCredentials(let reason) = outcome { outcome = .rejected(reason: "401 \(reason) with a new access token") }
        }
        return outcome
    }

    /// One request; its outcome and the access token it carried.
    private func attempt(_ nudge: PushNudge, registration: String, replacing failed: String?) async -> (PushOutcome, String?) {
        let bearer: String
        do {
            bearer = try await accessToken(replacing: failed)
        } catch {
            switch error {
            case .refused(let reason): return (.rejected(reason: reason), nil)
            case .unavailable(let reason): return (.retry(reason: reason, after: nil), nil)
            }
        }
        let message: JSONValue = [
            "message": [
                "token": .string(registration),
                "data": .object(nudge.fcmData()),
                // As APNs' collapse id and expiry: an offline device keeps only the newest nudge,
                // for an hour (FCM keeps up to 100 uncollapsed messages for 4 weeks by default).
                "android": ["priority": .string(priority.rawValue), "collapse_key": "sync_nudge", "ttl": "3600s"],
            ]
        ]
        var request = HTTPClientRequest(url: "\(baseURL)/v1/projects/\(account.projectID)/messages:send")
        request.method = .POST
        request.headers.add(name: "authorization", value: "Bearer \(bearer)")
        request.headers.add(name: "content-type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: message.serializedBytes()))
        do {
            let answer = try await http.exchange(request, timeout: timeout)
            return (.fcm(status: answer.status, body: answer.body, retryAfter: answer.retryAfter), bearer)
        } catch {
            return (.retry(reason: "\(error)", after: nil), bearer)
        }
    }
}
