public import Foundation
public import Hummingbird
public import Foundation
public import HummingbirdAuth
public import SyncGateCore
public import SyncGateWire

/// The user a bearer token authenticated.
public struct AuthenticatedUser: Sendable, Hashable {
    public var userID: String
    /// When the token expires (`nil`: it has no `exp`): an event stream ends then.
    public var expiresAt: Date?

    public init(userID: String, expiresAt: Date? = nil) {
        self.userID = userID
        self.expiresAt = expiresAt
    }
}

/// The request context of every SyncGate route: Hummingbird's, plus the authenticated user,
/// which ``BearerAuthenticator`` sets on the authenticated route group.
public struct SyncRequestContext: AuthRequestContext, RequestContext {
    public var coreContext: CoreRequestContextStorage
    public var identity: AuthenticatedUser? {
        didSet { notes.userID = identity?.userID }
    }
    /// Shared with the middleware outside the authenticator (the request log names the user).
    public let notes = RequestNotes()

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
