public import Hummingbird
public import HummingbirdAuth
public import SyncGateCore

/// The user a bearer token authenticated.
public struct AuthenticatedUser: Sendable, Hashable {
    public var userID: String

    public init(userID: String) {
        self.userID = userID
    }
}

/// The request context of every SyncGate route: Hummingbird's, plus the authenticated user,
/// which ``BearerAuthenticator`` sets on the authenticated route group.
public struct SyncRequestContext: AuthRequestContext, RequestContext {
    public var coreContext: CoreRequestContextStorage
    public var identity: AuthenticatedUser?

    public init(source: Source) {
        self.coreContext = .init(source: source)
        self.identity = nil
    }

    /// The authenticated user's id. Routes outside the authenticated group have none.
    public func userID() throws(ProtocolError) -> String {
        guard let identity else { throw ProtocolError(.unauthenticated, "this route needs Authorization: Bearer <token>") }
        return identity.userID
    }
}
