import SyncGateWire
import SyncGateConcurrency
import Foundation

/// The bearer token: asked from the app's provider when there is none, when the one held (a JWT)
/// expires within the refresh margin, and when the server refuses it.
final class TokenCache: Sendable {
    private let provider: @Sendable () async throws -> String
    private let refreshMargin: Duration
    private let now: @Sendable () -> Date
    private let token = Locked<(value: String, expires: Date?)?>(nil)

    init(provider: @escaping @Sendable () async throws -> String, refreshMargin: Duration, now: @escaping @Sendable () -> Date = Date.init) {
        self.provider = provider
        self.refreshMargin = refreshMargin
        self.now = now
    }

    func current() async throws -> String {
        guard let cached = token.value else { return try await fetch() }
        if !expiresSoon(cached.expires) { return cached.value }
        do {
            return try await fetch()
        } catch let error as SyncGateClientError {
            // Asked early, the provider failed: the token held is still good until its exp.
            guard let expires = cached.expires, now() < expires else { throw error }
            return cached.value
        }
    }

    /// A fresh token instead of `refused`, unless another request already replaced it.
    func refresh(replacing refused: String) async throws -> String {
        if let cached = token.value, cached.value != refused, !expiresSoon(cached.expires) { return cached.value }
        token.update { if $0?.value == refused { $0 = nil } }
        return try await fetch()
    }

    /// Drops the token (sign-out).
    func forget() {
        token.update { $0 = nil }
    }

    private func expiresSoon(_ expires: Date?) -> Bool {
        guard let expires else { return false }
        return now().addingTimeInterval(refreshMargin.timeInterval) >= expires
    }

    private func fetch() async throws -> String {
        let fresh: String
        do {
            fresh = try await provider()
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw SyncGateClientError(.tokenUnavailable, "the token provider failed: \(error)")
        }
        token.update { $0 = (fresh, Self.expiry(of: fresh)) }
        return fresh
    }

    /// A JWT's `exp` (RFC 7519: seconds since the epoch in the payload); `nil` for anything else.
    /// The signature is the server's to check: the client reads the claim only to refresh in time.
    static func expiry(of token: String) -> Date? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let payload = Data(base64Encoded: base64), let claims = try? JSONValue(parsing: Array(payload)),
            let exp = claims["exp"]?.numberValue
        else { return nil }
        return Date(timeIntervalSince1970: exp)
    }
}
