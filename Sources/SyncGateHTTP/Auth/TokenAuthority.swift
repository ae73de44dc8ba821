public import Foundation
import JWTKit
public import SyncGateCore

/// Signs and verifies the HS256 bearer tokens of the protocol: `sub` = user id; `exp` required
/// and at most ``maximumLifetimeSeconds`` ahead; `nbf` honoured.
public struct TokenAuthority: Sendable {
    /// Tokens may live at most this long (seconds from now to `exp`) unless configured otherwise.
    public static let defaultMaximumLifetimeSeconds = 30 * 86_400
    /// Clock skew allowed between the token's issuer and this server, for `nbf`.
    static let leewaySeconds: TimeInterval = 60

    let keys: JWTKeyCollection
    public let maximumLifetimeSeconds: Int

    public init(secret: String, maximumLifetimeSeconds: Int = TokenAuthority.defaultMaximumLifetimeSeconds) async {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        self.keys = keys
        self.maximumLifetimeSeconds = maximumLifetimeSeconds
    }

    struct Claims: JWTPayload {
        var sub: SubjectClaim
        var exp: ExpirationClaim?
        var nbf: NotBeforeClaim?
        var iat: IssuedAtClaim?

        /// Checked after the signature, in ``TokenAuthority/verify(_:)``, with messages of our own.
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    /// A token for `userID`, valid for `ttlSeconds`.
    public func issue(userID: String, ttlSeconds: Int) async throws -> String {
        let now = Date()
        let claims = Claims(
            sub: SubjectClaim(value: userID),
            exp: ExpirationClaim(value: now.addingTimeInterval(TimeInterval(ttlSeconds))),
            iat: IssuedAtClaim(value: now)
        )
        return try await keys.sign(claims)
    }

    /// The user of a valid token; a `401 UNAUTHENTICATED` error otherwise.
    public func verify(_ token: String, now: Date = Date()) async throws(ProtocolError) -> AuthenticatedUser {
        // jwt-kit verifies with its one (default) key whatever the header's `alg` says: a token
        // claiming RS256 but MAC'd with the secret passes. Harmless with one HMAC key, an
        // algorithm-confusion hole as soon as other keys join; the header must say HS256.
        guard Self.algorithm(of: token) == "HS256" else {
            throw ProtocolError(.unauthenticated, "malformed or unsupported token (HS256 JWT expected)")
        }
        let claims: Claims
        do {
            claims = try await keys.verify(token, as: Claims.self)
        } catch let error as JWTError {
            switch error.errorType {
            case .signatureVerificationFailed: throw ProtocolError(.unauthenticated, "token signature is invalid")
            default: throw ProtocolError(.unauthenticated, "malformed or unsupported token (HS256 JWT expected)")
            }
        } catch {
            throw ProtocolError(.unauthenticated, "malformed token")
        }
        guard let expiry = claims.exp?.value else { throw ProtocolError(.unauthenticated, "token has no expiry (exp)") }
        guard expiry > now else { throw ProtocolError(.unauthenticated, "token expired") }
        guard expiry.timeIntervalSince(now) <= TimeInterval(maximumLifetimeSeconds) + Self.leewaySeconds else {
            throw ProtocolError(.unauthenticated, "token lives longer than the allowed \(maximumLifetimeSeconds) s (exp too far ahead)")
        }
        if let notBefore = claims.nbf?.value, notBefore.timeIntervalSince(now) > Self.leewaySeconds {
            throw ProtocolError(.unauthenticated, "token is not valid yet (nbf)")
        }
        guard IdentifierLimits.isValidUserID(claims.sub.value) else {
            throw ProtocolError(.unauthenticated, "token subject must be 1 to \(IdentifierLimits.userID) characters")
        }
        return AuthenticatedUser(userID: claims.sub.value, expiresAt: expiry)
    }

    private struct Header: Decodable {
        var alg: String
    }

    /// The `alg` of a compact JWS's header, if it decodes.
    static func algorithm(of token: String) -> String? {
        guard let encoded = token.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false).first else { return nil }
        var base64 = encoded.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let data = Data(base64Encoded: base64) else { return nil }
        return try? JSONDecoder().decode(Header.self, from: data).alg
    }
}
