import HTTPTypes
package import Hummingbird
import HummingbirdAuth
import SyncGateCore
import SyncGateWire

/// Authenticates every request of the group it guards from `Authorization: Bearer <JWT>`, once,
/// before any route runs: a request without a valid token never reaches a route (401).
package struct BearerAuthenticator: AuthenticatorMiddleware {
    package typealias Context = SyncRequestContext
    let authority: TokenAuthority

    package func authenticate(request: Request, context: Context) async throws -> AuthenticatedUser? {
        guard let header = request.headers[.authorization] else {
            throw ProtocolError(.unauthenticated, "missing Authorization: Bearer <token>")
        }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer", !parts[1].isEmpty, parts[1].utf8.count <= 8192 else {
            throw ProtocolError(.unauthenticated, "Authorization must be 'Bearer <token>'")
        }
        return try await authority.verify(String(parts[1]))
    }
}
