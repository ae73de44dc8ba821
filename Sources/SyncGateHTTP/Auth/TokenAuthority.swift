package import Foundation
import JWTKit
import Synchronization
import SyncGateCore
package import SyncGateWire
import SyncGateStorage

/// Verifies the bearer tokens of the protocol: HS256 with the server's secret (which it also
/// signs, for development and `syncgate token`), and RS256/ES256/EdDSA (and the other asymmetric
/// JWS algorithms) from the app's identity provider, whose keys ``IdentityProviderKeys`` fetches.
/// The user id is `sub` (a provider's token: the configured claim); `exp` required and at most
/// ``maximumLifetimeSeconds`` ahead; `nbf` honoured; a provider's `iss`/`aud` checked when configured.
package struct TokenAuthority: Sendable {
    /// Tokens may live at most this long (seconds from now to `exp`) unless configured otherwise.
    package static let defaultMaximumLifetimeSeconds = 30 * 86_400
    /// Clock skew allowed between the token's issuer and this server, for `nbf`.
    static let leewaySeconds: TimeInterval = 60

    /// The shared secret's key; `nil` when only the identity provider's tokens are accepted.
    let keys: JWTKeyCollection?
    package let identityProvider: IdentityProviderKeys?
    package let maximumLifetimeSeconds: Int
    /// Tokens whose signature verified lately: a device sends the same token with every request.
    let verified = VerifiedTokens()

    package init(secret: String, maximumLifetimeSeconds: Int = TokenAuthority.defaultMaximumLifetimeSeconds) async {
        await self.init(secret: Optional(secret), identityProvider: nil, maximumLifetimeSeconds: maximumLifetimeSeconds)
    }

    /// - Parameters:
    ///   - secret: HS256 tokens are accepted (and can be issued) only with one.
    ///   - identityProvider: the app's identity provider, whose asymmetric tokens are accepted.
    package init(secret: String?, identityProvider: IdentityProviderKeys?, maximumLifetimeSeconds: Int = TokenAuthority.defaultMaximumLifetimeSeconds) async {
        if let secret {
            let keys = JWTKeyCollection()
            await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
            self.keys = keys
        } else {
            self.keys = nil
        }
        self.identityProvider = identityProvider
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

    struct NoSecret: Error, CustomStringConvertible {
        var description: String { "no signing secret is configured (SYNCGATE_JWT_SECRET): tokens come from the identity provider" }
    }

    /// Claims of an identity provider's token; the user id is read apart (its claim is configurable).
    struct ProviderClaims: JWTPayload {
        var exp: ExpirationClaim?
        var nbf: NotBeforeClaim?
        var iss: IssuerClaim?
        var aud: AudienceClaim?

        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    /// A token for `userID`, valid for `ttlSeconds`, signed with the secret.
    package func issue(userID: String, ttlSeconds: Int) async throws -> String {
        guard let keys else { throw NoSecret() }
        let now = Date()
        let claims = Claims(
            sub: SubjectClaim(value: userID),
            exp: ExpirationClaim(value: now.addingTimeInterval(TimeInterval(ttlSeconds))),
            iat: IssuedAtClaim(value: now)
        )
        return try await keys.sign(claims)
    }

    /// The user of a valid token; a `401 UNAUTHENTICATED` error otherwise.
    ///
    /// A token whose signature verified in the last ``VerifiedTokens/lifetime`` is not verified
    /// again (its claims are checked again, against `now`): a key an identity provider withdraws
    /// stops being accepted within that time.
    package func verify(_ token: String, now: Date = Date()) async throws(ProtocolError) -> AuthenticatedUser {
        if let claims = verified.claims(of: token, now: now) {
            return try check(subject: claims.subject, expiry: claims.expiry, notBefore: claims.notBefore, now: now)
        }
        let claims = try await verifySignature(token)
        let user = try check(subject: claims.subject, expiry: claims.expiry, notBefore: claims.notBefore, now: now)
        verified.insert(token, claims: claims, now: now)
        return user
    }

    /// The claims of a token whose signature verifies.
    private func verifySignature(_ token: String) async throws(ProtocolError) -> VerifiedTokens.Claims {
        // The header's `alg` picks the key set, and each set accepts only its own algorithms:
        // jwt-kit verifies with a default key whatever `alg` says, so without this a token MAC'd
        // with the secret could pass as "RS256" (or a provider's public key be used as an HMAC
        // secret). HS256 goes to the secret, the asymmetric algorithms to the provider's keys by `kid`.
        let header = Self.header(of: token)
        let expected = identityProvider == nil ? "HS256 JWT expected" : keys == nil ? "a JWT from the identity provider expected" : "HS256 or identity provider JWT expected"
        let subject: String
        let expiry: Date?
        let notBefore: Date?
        if header?.alg == "HS256", let keys {
            let claims: Claims = try await Self.verify(token, with: keys, expected: expected)
            (subject, expiry, notBefore) = (claims.sub.value, claims.exp?.value, claims.nbf?.value)
        } else if let header, let provider = identityProvider, IdentityProviderKeys.algorithms.contains(header.alg) {
            let claims = try await Self.verifiedByProvider(token, header: header, provider: provider, expected: expected)
            let configuration = provider.configuration
            if let audience = configuration.audience, !(claims.aud?.value.contains(audience) ?? false) {
                throw ProtocolError(.unauthenticated, "token audience (aud) does not include this app")
            }
            if let service = configuration.serviceAudience, claims.aud?.value.contains(service) ?? false {
                throw ProtocolError(.unauthenticated, "a service token (aud '\(service)') is accepted by the service API only, never as a user's")
            }
            guard let user = Self.stringClaim(configuration.userClaim, of: token) else {
                throw ProtocolError(.unauthenticated, "token has no '\(configuration.userClaim)' claim (the user id)")
            }
            (subject, expiry, notBefore) = (user, claims.exp?.value, claims.nbf?.value)
        } else {
            throw ProtocolError(.unauthenticated, "malformed or unsupported token (\(expected))")
        }
        return VerifiedTokens.Claims(subject: subject, expiry: expiry, notBefore: notBefore)
    }

    /// The claims of a token an identity provider's key signed, its issuer checked.
    private static func verifiedByProvider(
        _ token: String, header: Header, provider: IdentityProviderKeys, expected: String
    ) async throws(ProtocolError) -> ProviderClaims {
        guard let keyID = header.kid else { throw ProtocolError(.unauthenticated, "token has no key id (kid)") }
        let found: JWTKeyCollection
        switch await provider.keys(for: keyID) {
        case .found(let keys): found = keys
        case .unknown: throw ProtocolError(.unauthenticated, "token is signed with a key the identity provider does not publish")
        case .unavailable: throw ProtocolError(.unavailable, "the identity provider's keys cannot be fetched; retry later", retryAfterSeconds: 5)
        }
        let claims: ProviderClaims = try await verify(token, with: found, expected: expected)
        if let issuer = provider.configuration.issuer, claims.iss?.value != issuer {
            throw ProtocolError(.unauthenticated, "token issuer (iss) is not the configured identity provider")
        }
        return claims
    }

    /// Whether the identity provider's service tokens are accepted (``verifyService(_:now:)``).
    package var acceptsServiceTokens: Bool { identityProvider?.configuration.serviceAudience != nil }

    /// The backend a service token from the identity provider authenticates (an OAuth client
    /// credentials token): signed by the provider, its `aud` including the service audience, the
    /// service named by the configured claim and among the configured clients, its scopes
    /// `syncgate:read|write|admin` in `scope`, `scp` or `roles`. Verified on every request:
    /// backends send far fewer than devices.
    package func verifyService(_ token: String, now: Date = Date()) async throws(ProtocolError) -> AuthenticatedService {
        guard let provider = identityProvider, let audience = provider.configuration.serviceAudience else {
            throw ProtocolError(.unauthenticated, "service routes take a service key (sgk_…)")
        }
        let expected = "a service key (sgk_…) or a service token from the identity provider expected"
        guard let header = Self.header(of: token), IdentityProviderKeys.algorithms.contains(header.alg) else {
            throw ProtocolError(.unauthenticated, "malformed or unsupported token (\(expected))")
        }
        let claims = try await Self.verifiedByProvider(token, header: header, provider: provider, expected: expected)
        guard claims.aud?.value.contains(audience) ?? false else {
            throw ProtocolError(.unauthenticated, "token audience (aud) does not include the service audience '\(audience)'")
        }
        let claim = provider.configuration.serviceClaim
        guard let name = Self.stringClaim(claim, of: token), NewServiceKey.isValidName(name) else {
            throw ProtocolError(.unauthenticated, "a service token's '\(claim)' claim names the service: 1 to 64 characters of A-Z a-z 0-9 . _ -")
        }
        guard provider.configuration.serviceClients.contains(name) else {
            throw ProtocolError(.unauthenticated, "'\(name)' is not a client whose service tokens this server accepts (SYNCGATE_JWT_SERVICE_CLIENTS)")
        }
        // The checks of any token (a name is a valid user id too).
        _ = try check(subject: name, expiry: claims.exp?.value, notBefore: claims.nbf?.value, now: now)
        return AuthenticatedService(name: name, scopes: Self.serviceScopes(of: token))
    }

    /// The SyncGate scopes of a verified token: `syncgate:<scope>` among `scope` (a
    /// space-separated string, RFC 8693), `scp` (a string or an array, as Okta writes it) or
    /// `roles` (Azure AD's application permissions).
    static func serviceScopes(of token: String) -> Set<ServiceScope> {
        guard let object = payload(of: token) else { return [] }
        var values: [String] = []
        for claim in ["scope", "scp", "roles"] {
            if let text = object[claim] as? String { values += text.split(separator: " ").map(String.init) }
            if let list = object[claim] as? [String] { values += list }
        }
        return Set(values.compactMap { value in value.hasPrefix("syncgate:") ? ServiceScope(rawValue: String(value.dropFirst("syncgate:".count))) : nil })
    }

    private static func verify<Payload: JWTPayload>(_ token: String, with keys: JWTKeyCollection, expected: String) async throws(ProtocolError) -> Payload {
        do {
            return try await keys.verify(token, as: Payload.self)
        } catch let error as JWTError {
            switch error.errorType {
            case .signatureVerificationFailed: throw ProtocolError(.unauthenticated, "token signature is invalid")
            default: throw ProtocolError(.unauthenticated, "malformed or unsupported token (\(expected))")
            }
        } catch {
            throw ProtocolError(.unauthenticated, "malformed token")
        }
    }

    /// The checks every token passes, whoever signed it.
    private func check(subject: String, expiry: Date?, notBefore: Date?, now: Date) throws(ProtocolError) -> AuthenticatedUser {
        guard let expiry else { throw ProtocolError(.unauthenticated, "token has no expiry (exp)") }
        guard expiry > now else { throw ProtocolError(.unauthenticated, "token expired") }
        guard expiry.timeIntervalSince(now) <= TimeInterval(maximumLifetimeSeconds) + Self.leewaySeconds else {
            throw ProtocolError(.unauthenticated, "token lives longer than the allowed \(maximumLifetimeSeconds) s (exp too far ahead)")
        }
        if let notBefore, notBefore.timeIntervalSince(now) > Self.leewaySeconds {
            throw ProtocolError(.unauthenticated, "token is not valid yet (nbf)")
        }
        guard IdentifierLimits.isValidUserID(subject) else {
            throw ProtocolError(.unauthenticated, "token subject must be 1 to \(IdentifierLimits.userID) characters without control characters")
        }
        return AuthenticatedUser(userID: subject, expiresAt: expiry)
    }

    struct Header: Decodable {
        var alg: String
        var kid: String?
    }

    /// The header of a compact JWS, if it decodes.
    static func header(of token: String) -> Header? {
        segment(0, of: token).flatMap { try? JSONDecoder().decode(Header.self, from: $0) }
    }

    /// A string claim of the (already verified) payload.
    static func stringClaim(_ name: String, of token: String) -> String? {
        payload(of: token)?[name] as? String
    }

    /// The (already verified) payload's members.
    static func payload(of token: String) -> [String: Any]? {
        segment(1, of: token).flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
    }

    /// The base64url-decoded segment `index` of a compact JWS.
    static func segment(_ index: Int, of token: String) -> Data? {
        let parts = token.split(separator: ".", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var base64 = parts[index].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }
}

/// Tokens whose signature verified, with the claims every request checks again.
final class VerifiedTokens: Sendable {
    struct Claims: Sendable {
        var subject: String
        var expiry: Date?
        var notBefore: Date?
    }

    /// How long a verified signature is trusted without verifying it again.
    static let lifetime: TimeInterval = 60
    /// The most tokens kept; past it the oldest half goes.
    static let capacity = 20_000

    private struct Entry {
        var claims: Claims
        var verifiedAt: Date
    }

    private let entries = Mutex<[String: Entry]>([:])

    func claims(of token: String, now: Date) -> Claims? {
        entries.withLock { entries in
            guard let entry = entries[token] else { return nil }
            guard now.timeIntervalSince(entry.verifiedAt) < Self.lifetime, entry.verifiedAt <= now else {
                entries[token] = nil
                return nil
            }
            return entry.claims
        }
    }

    func insert(_ token: String, claims: Claims, now: Date) {
        entries.withLock { entries in
            if entries.count >= Self.capacity {
                let cutoff = entries.values.map(\.verifiedAt).sorted()[entries.count / 2]
                entries = entries.filter { $0.value.verifiedAt > cutoff }
            }
            entries[token] = Entry(claims: claims, verifiedAt: now)
        }
    }

    var count: Int { entries.withLock { $0.count } }
}
