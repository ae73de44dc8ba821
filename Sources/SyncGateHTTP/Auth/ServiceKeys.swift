import Foundation
import HTTPTypes
package import Hummingbird
import Synchronization
import SyncGateConcurrency
import SyncGateCore
package import SyncGateStorage
import SyncGateWire

/// The backend a service key authenticated: the key's name, scopes and reach.
package struct AuthenticatedService: Sendable, Hashable {
    package var name: String
    package var scopes: Set<ServiceScope>
    /// Whom it may act for; `nil`: everyone.
    package var reach: ServiceReach?

    package init(name: String, scopes: Set<ServiceScope>, reach: ServiceReach? = nil) {
        self.name = name
        self.scopes = scopes
        self.reach = reach
    }

    /// Where what the service writes comes from, as jobs and logs name it: `service:<name>`.
    package var origin: String { "service:\(name)" }

    /// `403 PERMISSION_DENIED` unless it may act for `scope`.
    func check(reaching scope: Scope) throws(ProtocolError) {
        guard let reach, !reach.covers(scope) else { return }
        throw ProtocolError(.permissionDenied, "the service key '\(name)' does not reach \(ServiceRoutes.describe(scope))")
    }
}

/// Checks service keys against the store, remembering a valid key for `cacheTime` so that a busy
/// backend costs one lookup per front every few seconds; a revocation therefore takes effect
/// within `cacheTime`. Unknown and revoked keys are not remembered (a new key works at once),
/// and at most `capacity` keys are. Keys are looked up one at a time per front: requests with the
/// same new key wait for the first one's answer, and a flood of made-up keys holds one of the
/// front's database connections, not all of them. A key known valid whose time ran out is looked
/// up again in a queue of its own, not behind such a flood, and at most `maximumWaiting` requests
/// wait to have an unknown key looked up: past that they answer `429` with `Retry-After`.
package final class ServiceKeyVerifier: Sendable {
    let store: any FrontStore
    let cacheTime: Duration
    let capacity: Int
    let now: @Sendable () -> ContinuousClock.Instant
    /// Keys found valid, kept past their `until` (to be looked up again in `revalidations`)
    /// until the cache is full.
    private let cache = Mutex<[String: (service: AuthenticatedService, until: ContinuousClock.Instant)]>([:])
    private let lookups = AsyncLock()
    private let revalidations = AsyncLock()
    package static let maximumWaiting = 64

    package init(
        store: any FrontStore, cacheTime: Duration = .seconds(5), capacity: Int = 1024,
        now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }
    ) {
        self.store = store
        self.cacheTime = cacheTime
        self.capacity = capacity
        self.now = now
    }

    /// The service `key` authenticates, or `401 UNAUTHENTICATED`.
    package func verify(_ key: String) async throws -> AuthenticatedService {
        // Only what could be a key reaches the store: `sgk_` and 43 characters of base64url.
        guard ServiceKeySecret.isWellFormed(key) else {
            throw ProtocolError(.unauthenticated, "service routes take a service key (sgk_…), not a user's token")
        }
        let hash = ServiceKeySecret.hash(key)
        if let cached = remembered(hash) { return cached }
        let known = cache.withLock { $0[hash] != nil }
        guard known || lookups.waiting < Self.maximumWaiting else {
            throw ProtocolError(.rateLimited, "too many unknown service keys are being checked; retry later", retryAfterSeconds: 1)
        }
        return try await (known ? revalidations : lookups).withLock {
            // Another request may have looked this key up meanwhile.
            if let cached = remembered(hash) { return cached }
            return try await lookUp(hash)
        }
    }

    private func remembered(_ hash: String) -> AuthenticatedService? {
        let instant = now()
        return cache.withLock { $0[hash] }.flatMap { $0.until > instant ? $0.service : nil }
    }

    private func lookUp(_ hash: String) async throws -> AuthenticatedService {
        guard let record = try await store.serviceKey(hash: hash) else {
            throw ProtocolError(.unauthenticated, "unknown service key")
        }
        guard record.revokedAt == nil else {
            cache.withLock { _ = $0.removeValue(forKey: hash) }
            throw ProtocolError(.unauthenticated, "this service key was revoked")
        }
        let service = AuthenticatedService(name: record.name, scopes: record.scopes, reach: record.reach)
        let instant = now()
        cache.withLock { cache in
            if cache.count >= capacity { cache = cache.filter { $0.value.until > instant } }
            if cache.count >= capacity { cache.removeAll(keepingCapacity: true) }
            cache[hash] = (service, instant + cacheTime)
        }
        return service
    }
}

/// Authenticates every request of the service group (`/v1/service`) from
/// `Authorization: Bearer sgk_…`, or a service token of the identity provider when configured: a
/// user's token is refused there, and a service key or token anywhere else.
package struct ServiceKeyAuthenticator: RouterMiddleware {
    package typealias Context = SyncRequestContext
    let verifier: ServiceKeyVerifier
    let authority: TokenAuthority

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let header = request.headers[.authorization] else {
            throw ProtocolError(.unauthenticated, "missing Authorization: Bearer <service key>")
        }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer", !parts[1].isEmpty else {
            throw ProtocolError(.unauthenticated, "Authorization must be 'Bearer <service key>'")
        }
        let credential = String(parts[1])
        var context = context
        if authority.acceptsServiceTokens, !credential.hasPrefix(ServiceKeySecret.prefix) {
            context.service = try await authority.verifyService(credential)
        } else {
            context.service = try await verifier.verify(credential)
        }
        return try await next(request, context)
    }
}
