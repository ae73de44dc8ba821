/// A one-way gate for async code: tasks wait until it is opened once, and then never again.
/// `serve` opens one when its migrations are applied, so the in-process workers and the live
/// waiters start reading the store then, and not before.
///
/// Written by hand: neither the standard library nor the mirrored packages offer an async latch
/// with cancellable waiters.
public final class Latch: Sendable {
    private struct State {
        var isOpen = false
        var waiters = ParkedWaiters()
    }

    private let state = Locked(State())

    public init() {}

    public var isOpen: Bool { state.update { $0.isOpen } }

    /// How many tasks wait now (tests wait for a task to reach the gate).
    public var waiting: Int { state.update { $0.waiters.count } }

    /// Opens the gate: every waiter, and every later one, goes on. Opening twice is harmless.
    public func open() {
        let waiters = state.update { state -> [ParkedWaiters.Continuation] in
            state.isOpen = true
            return state.waiters.removeAll()
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once the gate is open; throws `CancellationError` if the task is cancelled first.
    public func wait() async throws {
        try await ParkedWaiters.wait(in: state, at: \.waiters) { $0.isOpen }
    }
}
