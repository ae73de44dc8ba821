import SyncGateWire
import SyncGateConcurrency
import Foundation

/// The bearer token: asked from the app's provider when there is none, when the one held (a JWT)
/// expires within the refresh margin, and when the server refuses it. Concurrent requests share
/// one ask; a token the provider gave when asked early that still expires within the margin (its
/// own cache, or a clock ahead of the issuer's) is used until its exp or a refusal, not asked
/// for again at every request.
final class TokenCache: Sendable {
    private struct Held {
        var value: String
        var expires: Date?
        /// Given when asked early, and no fresher: not asked for early again.
        var keepToExpiry = false
    }

    private let provider: @Sendable () async throws -> String
    private let refreshMargin: Duration
    private let now: @Sendable () -> Date
    private let token = Locked<Held?>(nil)
    /// The ask under way, which every request waiting for a token shares, and how many wait for
    /// it: the last one cancelled cancels it (the provider may wait on the user).
    private let asking = Locked<(task: Task<String, any Error>, waiters: Int)?>(nil)
    /// Set by ``forget()``: no token is asked for or kept afterwards (signed out).
    private let forgotten = Locked(false)
    /// Set by ``freeze()``: the token held is used, and no other asked for (signing out).
    private let frozen = Locked(false)

    init(provider: @escaping @Sendable () async throws -> String, refreshMargin: Duration, now: @escaping @Sendable () -> Date = Date.init) {
        self.provider = provider
        self.refreshMargin = refreshMargin
        self.now = now
    }

    func current() async throws -> String {
        guard let cached = token.value else { return try await fetch(early: false) }
        if !expiresSoon(cached.expires) { return cached.value }
        if cached.keepToExpiry, let expires = cached.expires, now() < expires { return cached.value }
        do {
            return try await fetch(early: true)
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
        return try await fetch(early: false)
    }

    /// Asks the provider no more (sign-out has begun; the app may already hand out the next
    /// user's tokens): a request still running uses the token held, or fails as closed.
    func freeze() {
        frozen.update { $0 = true }
    }

    /// Drops the token for good (sign-out): an ask under way is not kept, and none is made.
    func forget() {
        forgotten.update { $0 = true }
        token.update { $0 = nil }
    }

    private func expiresSoon(_ expires: Date?) -> Bool {
        guard let expires else { return false }
        return now().addingTimeInterval(refreshMargin.timeInterval) >= expires
    }

    private func fetch(early: Bool) async throws -> String {
        let ask = asking.update { asking -> Task<String, any Error> in
            if let current = asking {
                asking?.waiters += 1
                return current.task
            }
            let task = Task { try await self.ask(early: early) }
            asking = (task, 1)
            return task
        }
        return try await withTaskCancellationHandler {
            try await ask.value
        } onCancel: {
            let last = asking.update { asking -> Bool in
                guard asking?.task == ask else { return false }
                asking?.waiters -= 1
                return asking?.waiters == 0
            }
            if last { ask.cancel() }
        }
    }

    private func ask(early: Bool) async throws -> String {
        defer { asking.update { $0 = nil } }
        try Task.checkCancellation()
        if forgotten.value || frozen.value { throw SyncGateClientError(.closed, "signed out") }
        let fresh: String
        do {
            fresh = try await provider()
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw SyncGateClientError(.tokenUnavailable, "the token provider failed: \(error)")
        }
        // Asked before sign-out began, answered after: possibly the next user's token.
        if forgotten.value || frozen.value { throw SyncGateClientError(.closed, "signed out") }
        let expires = Self.expiry(of: fresh)
        token.update { token in
            guard !forgotten.value, !frozen.value else { return }
            token = Held(value: fresh, expires: expires, keepToExpiry: early && expiresSoon(expires))
        }
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
