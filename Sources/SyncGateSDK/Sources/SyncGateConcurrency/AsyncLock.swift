/// First-come, first-served mutual exclusion for async code: a holder may suspend while it
/// holds the lock (the SQLite driver's write transaction across several accesses, the SDK's one
/// sync cycle at a time). A waiter whose task is cancelled leaves the queue and throws
/// `CancellationError`; a holder keeps the lock until its body returns.
///
/// Written by hand: neither the standard library nor the mirrored packages offer an async mutex.
public final class AsyncLock: Sendable {
    private struct State {
        var held = false
        var waiters = ParkedWaiters()
    }

    private let state = Locked(State())

    public init() {}

    /// How many tasks wait for the lock now (not counting its holder).
    public var waiting: Int { state.value.waiters.count }

    /// Runs `body` holding the lock; throws `CancellationError` if the task is cancelled while it
    /// waits for the lock (then `body` does not run).
    public func withLock<Result: Sendable>(_ body: () async throws -> Result) async throws -> Result {
        try await acquire()
        defer { release() }
        return try await body()
    }

    private func acquire() async throws {
        try await ParkedWaiters.wait(in: state, at: \.waiters) { state in
            guard !state.held else { return false }
            state.held = true
            return true
        }
    }

    /// Hands the lock to the next waiter (it stays held), or frees it.
    private func release() {
        let next = state.update { state -> ParkedWaiters.Continuation? in
            guard let next = state.waiters.removeFirst() else {
                state.held = false
                return nil
            }
            return next
        }
        next?.resume()
    }
}
