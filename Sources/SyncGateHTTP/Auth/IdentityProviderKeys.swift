import AsyncHTTPClient
import Foundation
import JWTKit
package import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// The signing keys of the app's identity provider, from its JWKS URL(s).
///
/// Keys are fetched with async-http-client and kept for the response's `Cache-Control: max-age`
/// (clamped to 1 minute … 1 day; 1 hour without one). When they are due, the next token triggers
/// a refresh in the background and is verified with the keys in hand; a token naming a key id we
/// do not know triggers a refresh at once (at most one per ``minimumRefreshInterval``: a flood of
/// made-up ids costs the provider nothing). When the provider is unreachable the keys in hand
/// keep serving; only a key we never had is unverifiable then (`503`, retryable).
package actor IdentityProviderKeys {
    /// The settings of one provider (the README's "Use your auth provider").
    package struct Configuration: Sendable, Hashable {
        package var jwksURLs: [String]
        /// Required `iss` when set.
        package var issuer: String?
        /// Required among `aud` when set.
        package var audience: String?
        /// The claim that holds the user id.
        package var userClaim: String
        /// A token whose `aud` includes it is a backend's (client credentials), accepted by the
        /// service API only and never as a user's; `nil`: the provider issues no service tokens.
        package var serviceAudience: String?
        /// The claim of a service token that names the service (its origin `service:<name>`).
        package var serviceClaim: String
        /// The clients (values of ``serviceClaim``) whose service tokens are accepted: a provider
        /// may hand a signed-in user a token for any audience and scope it knows, so the audience
        /// alone does not tell a backend's token from a user's.
        package var serviceClients: Set<String>

        package init(
            jwksURLs: [String], issuer: String? = nil, audience: String? = nil, userClaim: String = "sub", serviceAudience: String? = nil,
            serviceClaim: String = "azp", serviceClients: Set<String> = []
        ) {
            self.jwksURLs = jwksURLs
            self.issuer = issuer
            self.audience = audience
            self.userClaim = userClaim
            self.serviceAudience = serviceAudience
            self.serviceClaim = serviceClaim
            self.serviceClients = serviceClients
        }
    }

    /// Asymmetric algorithms a provider's token may use (never HS256: that is the shared secret's).
    static let algorithms: Set<String> = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
    static let defaultLifetime: Duration = .seconds(3600)
    static let maximumLifetime: Duration = .seconds(86_400)

    package nonisolated let configuration: Configuration
    let minimumRefreshInterval: Duration
    let minimumLifetime: Duration
    let fetchTimeout: Duration
    let logger: Logger
    /// The time, for the refresh interval and the keys' lifetime (tests move it by hand).
    let clock: @Sendable () -> ContinuousClock.Instant

    private var keys = JWTKeyCollection()
    private var keyIDs: Set<String> = []
    /// Each URL's last document fetched: one provider that is down keeps its keys in hand and
    /// does not hold back the others'.
    private var documents: [String: JWKS] = [:]
    private var expires: ContinuousClock.Instant?
    private var lastAttempt: ContinuousClock.Instant?
    private var lastFetchSucceeded = false
    private var refreshingTask: Task<Bool, Never>?

    /// - Parameters:
    ///   - minimumRefreshInterval: fetches (for an unknown key id, or keys due) are at least this far apart.
    ///   - minimumLifetime: keys are kept at least this long whatever `Cache-Control` says.
    package init(
        configuration: Configuration, minimumRefreshInterval: Duration = .seconds(10), minimumLifetime: Duration = .seconds(60),
        fetchTimeout: Duration = .seconds(5), logger: Logger, clock: @escaping @Sendable () -> ContinuousClock.Instant = { .now }
    ) {
        self.configuration = configuration
        self.minimumRefreshInterval = minimumRefreshInterval
        self.minimumLifetime = minimumLifetime
        self.fetchTimeout = fetchTimeout
        self.logger = logger
        self.clock = clock
    }

    /// The outcome of looking a key id up.
    enum Lookup {
        case found(JWTKeyCollection)
        /// Keys were fetched and this id is not among them.
        case unknown
        /// The id is unknown and the provider could not be reached to learn it.
        case unavailable
    }

    /// The keys that can verify a token signed with `keyID`, refreshing when due or when the id is new.
    func keys(for keyID: String) async -> Lookup {
        let now = clock()
        let attemptedRecently = lastAttempt.map { $0.duration(to: now) < minimumRefreshInterval } ?? false
        if keyIDs.contains(keyID) {
            // Due keys are refreshed in the background, at most once per interval (a provider that
            // is down is not asked again by every request).
            if let expires, expires <= now, !attemptedRecently { _ = startRefresh(now: now) }
            return .found(keys)
        }
        if attemptedRecently, refreshingTask == nil {
            return lastFetchSucceeded ? .unknown : .unavailable
        }
        let fetched = await startRefresh(now: now).value
        if keyIDs.contains(keyID) { return .found(keys) }
        return fetched ? .unknown : .unavailable
    }

    /// Whether a fetch is under way (tests wait for one begun in the background to end).
    package var refreshing: Bool { refreshingTask != nil }

    /// Fetches now (at start, so the first request need not wait); false when it failed.
    @discardableResult
    package func refresh() async -> Bool {
        await startRefresh(now: clock()).value
    }

    /// One refresh at a time; callers arriving meanwhile wait for the one in flight.
    private func startRefresh(now: ContinuousClock.Instant) -> Task<Bool, Never> {
        if let refreshingTask { return refreshingTask }
        lastAttempt = now
        let task = Task { await self.fetchAll() }
        refreshingTask = task
        return task
    }

    private func fetchAll() async -> Bool {
        defer { refreshingTask = nil }
        var lifetimes: [Duration] = []
        var failed = 0
        for url in configuration.jwksURLs {
            do {
                let (jwks, lifetime) = try await Self.fetch(url, timeout: fetchTimeout, minimumLifetime: minimumLifetime)
                documents[url] = jwks
                lifetimes.append(lifetime)
            } catch {
                // Keep its keys in hand: a provider outage must not sign its users out.
                logger.warning("fetching the identity provider's keys failed; keeping the keys in hand", metadata: [
                    "syncgate.jwks_url": "\(url)", "syncgate.error": "\(error)", "syncgate.keys_in_hand": "\(documents[url]?.keys.count ?? 0)",
                ])
                failed += 1
            }
        }
        // Nothing new: the keys in hand stay as they are.
        guard failed < configuration.jwksURLs.count else {
            lastFetchSucceeded = false
            return false
        }
        let collection = JWTKeyCollection()
        var identifiers: Set<String> = []
        for url in configuration.jwksURLs {
            guard let jwks = documents[url] else { continue }
            for jwk in jwks.keys {
                // Only signing keys with an id (a token selects its key by `kid`).
                guard let kid = jwk.keyIdentifier?.string else { continue }
                do {
                    try await collection.add(jwk: jwk)
                    identifiers.insert(kid)
                } catch {
                    logger.warning("skipping a key of the identity provider", metadata: ["syncgate.kid": "\(kid)", "syncgate.error": "\(error)"])
                }
            }
        }
        keys = collection
        keyIDs = identifiers
        // A provider that failed is asked again once the refresh interval has passed.
        lastFetchSucceeded = failed == 0
        expires = failed == 0 ? clock() + (lifetimes.min() ?? Self.defaultLifetime) : clock()
        logger.info("identity provider keys loaded", metadata: ["syncgate.keys": "\(identifiers.sorted())"])
        return failed == 0
    }

    struct FetchError: Error, CustomStringConvertible {
        var description: String
    }

    /// One provider's JWKS, fetched within `timeout` whole: AsyncHTTPClient's deadline ends with
    /// the answer's head, and a body that stalls after it would hold every request waiting for
    /// a new key id until the client's read timeout.
    static func fetch(_ url: String, timeout: Duration, minimumLifetime: Duration) async throws -> (JWKS, Duration) {
        try await withThrowingTaskGroup(of: (JWKS, Duration)?.self) { group in
            group.addTask { try await exchange(url, timeout: timeout, minimumLifetime: minimumLifetime) }
            group.addTask {
                try await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            guard let fetched = try await group.next(), let document = fetched else {
                throw FetchError(description: "no whole answer within \(timeout)")
            }
            return document
        }
    }

    private static func exchange(_ url: String, timeout: Duration, minimumLifetime: Duration) async throws -> (JWKS, Duration) {
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Accept", value: "application/json")
        let response = try await HTTPClient.shared.execute(request, timeout: .init(timeout))
        guard response.status == .ok else { throw FetchError(description: "HTTP \(response.status.code)") }
        let body = try await response.body.collect(upTo: 1 << 20)
        let jwks = try JSONDecoder().decode(JWKS.self, from: Data(buffer: body))
        return (jwks, lifetime(cacheControl: response.headers["Cache-Control"].joined(separator: ","), minimum: minimumLifetime))
    }

    /// How long a JWKS response may be kept: its `max-age`, between `minimum` and a day;
    /// `no-cache`/`no-store` → `minimum`; an hour without either.
    package static func lifetime(cacheControl: String, minimum: Duration = .seconds(60)) -> Duration {
        let directives = cacheControl.lowercased().split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        if directives.contains("no-store") || directives.contains("no-cache") { return minimum }
        for directive in directives where directive.hasPrefix("max-age=") {
            if let seconds = Int(directive.dropFirst("max-age=".count)) {
                return min(max(.seconds(max(seconds, 0)), minimum), maximumLifetime)
            }
        }
        return defaultLifetime
    }
}

extension Data {
    init(buffer: ByteBuffer) {
        self.init(buffer.readableBytesView)
    }
}
