import SyncGateWire
import SyncGateConcurrency

/// The bearer token: asked from the app's provider when there is none, and again when the
/// server refuses it.
final class TokenCache: Sendable {
    private let provider: @Sendable () async throws -> String
    private let token = Locked<String?>(nil)

    init(provider: @escaping @Sendable () async throws -> String) {
        self.provider = provider
    }

    func current() async throws -> String {
        if let cached = token.update({ $0 }) { return cached }
        return try await fetch()
    }

    /// A fresh token instead of `refused`, unless another request already replaced it.
    func refresh(replacing refused: String) async throws -> String {
        if let cached = token.update({ $0 }), cached != refused { return cached }
        token.update { if $0 == refused { $0 = nil } }
        return try await fetch()
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
        token.update { $0 = fresh }
        return fresh
    }
}
