import Foundation
import JWTKit
public import SyncGateCore

/// Signs and verifies the HS256 bearer tokens of the protocol (`sub` = user id, `exp` honoured).
public struct TokenAuthority: Sendable {
    let keys: JWTKeyCollection

    public init(secret: String) async {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        self.keys = keys
    }

    struct Claims: JWTPayload {
        var sub: SubjectClaim
        var exp: ExpirationClaim?
        var iat: IssuedAtClaim?

        func verify(using algorithm: some JWTAlgorithm) async throws {
            try exp?.verifyNotExpired()
        }
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
    public func verify(_ token: String) async throws(ProtocolError) -> AuthenticatedUser {
        let claims: Claims
        do {
            claims = try await keys.verify(token, as: Claims.self)
        } catch let error as JWTError {
            switch error.errorType {
            case .claimVerificationFailure: throw ProtocolError(.unauthenticated, "token expired")
            case .signatureVerificationFailed: throw ProtocolError(.unauthenticated, "token signature is invalid")
            default: throw ProtocolError(.unauthenticated, "malformed or unsupported token (HS256 JWT expected)")
            }
        } catch {
            throw ProtocolError(.unauthenticated, "malformed token")
        }
        guard IdentifierLimits.isValidUserID(claims.sub.value) else {
            throw ProtocolError(.unauthenticated, "token subject must be 1 to \(IdentifierLimits.userID) characters")
        }
        return AuthenticatedUser(userID: claims.sub.value, expiresAt: claims.exp?.value)
    }
}
