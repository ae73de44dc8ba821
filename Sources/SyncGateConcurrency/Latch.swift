import Synchronization

/// A one-way gate for async code: tasks wait until it is opened once, and then never again.
/// `serve` opens one when its migrations are applied, so the in-process workers and the live
/// waiters start reading the store then, and not before.
///
/// Written by hand: neither the standard library nor the mirrored packages offer an async latch
/// with cancellable waiters.
public final class Latch: Sendable {
    private struct State {
        var isOpen = false
        var nextWaiter = 0
        var waiters: [(id: Int, continuation: CheckedContinuation<Void, any Error>)] = []
    }

    private let state = Mutex(State())

    public init() {}

    public var isOpen: Bool { state.withLock { $0.isOpen } }

    /// How many tasks wait now (tests wait for a task to reach the gate).
    public var waiting: Int { state.withLock { $0.waiters.count } }

    /// Opens the gate: every waiter, and every later one, goes on. Opening twice is harmless.
    public func open() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            state.isOpen = true
            defer { state.waiters = [] }
            return state.waiters.map(\.continuation)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once the gate is open; throws `CancellationError` if the task is cancelled first.
    public func wait() async throws {
        let id = state.withLock { state -> Int in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Decision { case open, cancelled, queued }
                let decision = state.withLock { state -> Decision in
                    if state.isOpen { return .open }
                    // Cancelled before it could queue: the cancellation handler found nothing to remove.
                    if Task.isCancelled { return .cancelled }
                    state.waiters.append((id, continuation))
                    return .queued
                }
                switch decision {
                case .open: continuation.resume()
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
}
