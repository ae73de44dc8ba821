import Synchronization

/// First-come, first-served mutual exclusion for async code: a holder may suspend while it
/// holds the lock (the SQLite driver's write transaction across several accesses, the SDK's one
/// sync cycle at a time). A waiter whose task is cancelled leaves the queue and throws
/// `CancellationError`; a holder keeps the lock until its body returns.
///
/// Written by hand: neither the standard library nor the mirrored packages offer an async mutex.
public final class AsyncLock: Sendable {
    private struct State {
        var held = false
        var nextWaiter = 0
        var waiters: [(id: Int, continuation: CheckedContinuation<Void, any Error>)] = []
    }

    private let state = Mutex(State())

    public init() {}

    /// Runs `body` holding the lock; throws `CancellationError` if the task is cancelled while it
    /// waits for the lock (then `body` does not run).
    public func withLock<Result: Sendable>(_ body: () async throws -> Result) async throws -> Result {
        try await acquire()
        defer { release() }
        return try await body()
    }

    private func acquire() async throws {
        let id = state.withLock { state -> Int in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Decision { case granted, cancelled, queued }
                let decision = state.withLock { state -> Decision in
                    // Cancelled before it could queue: the cancellation handler found nothing to remove.
                    if Task.isCancelled { return .cancelled }
                    guard state.held else {
                        state.held = true
                        return .granted
                    }
                    state.waiters.append((id, continuation))
                    return .queued
                }
                switch decision {
                case .granted: continuation.resume()
                case .cancelled: continuation.resume(throwing: CancellationError())
                case .queued: break
                }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, any Error>? in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: index).continuation
            }
            waiter?.resume(throwing: CancellationError())
        }
    }

    /// Hands the lock to the next waiter (it stays held), or frees it.
    private func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            guard !state.waiters.isEmpty else {
                state.held = false
                return nil
            }
            return state.waiters.removeFirst().continuation
        }
        next?.resume()
    }
}
