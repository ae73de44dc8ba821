package import Foundation
package import Hummingbird
package import Foundation
import HummingbirdAuth
import SyncGateCore
package import SyncGateWire
package import SyncGateStorage

/// The user a bearer token authenticated.
package struct AuthenticatedUser: Sendable, Hashable {
    package var userID: String
    /// When the token expires (`nil`: it has no `exp`): an event stream ends then.
    package var expiresAt: Date?
}

/// The request context of every SyncGate route: Hummingbird's, plus the authenticated user,
/// which ``BearerAuthenticator`` sets on the authenticated route group.
package struct SyncRequestContext: AuthRequestContext, RequestContext {
    package var coreContext: CoreRequestContextStorage
    package var identity: AuthenticatedUser? {
        didSet { notes.userID = identity?.userID }
    }
    /// The backend whose service key ``ServiceKeyAuthenticator`` accepted (service routes only).
    package var service: AuthenticatedService? {
        didSet { notes.service = service?.name }
    }
    /// The admin key a console page was signed in with (``ConsoleAuthenticator``): its forms'
    /// CSRF token derives from it.
    package var consoleKey: String?
    /// Shared with the middleware outside the authenticator (the request log names the user).
    package let notes = RequestNotes()

    package init(source: Source) {
        self.coreContext = .init(source: source)
        self.identity = nil
        self.service = nil
    }

    /// The authenticated user's id. Routes outside the authenticated group have none.
    package func userID() throws(ProtocolError) -> String {
        guard let identity else { throw ProtocolError(.unauthenticated, "this route needs Authorization: Bearer <token>") }
        return identity.userID
    }

    /// The authenticated service, when its key grants `scope`; `403 PERMISSION_DENIED` otherwise.
    package func service(granting scope: ServiceScope) throws(ProtocolError) -> AuthenticatedService {
        guard let service else { throw ProtocolError(.unauthenticated, "this route needs Authorization: Bearer <service key>") }
        guard service.scopes.contains(scope) else {
            throw ProtocolError(.permissionDenied, "the service key '\(service.name)' does not grant '\(scope.rawValue)'")
        }
        return service
    }
}
