import Synchronization

/// A first-come, first-served lock for async code: holders may suspend while they hold it.
///
/// The SQLite driver keeps a write transaction open across several accesses to GRDB's writer
/// connection; everything that writes takes this lock first, so nothing interleaves with it.
/// (Neither the standard library nor the mirrored packages offer an async mutex.)
final class AsyncLock: Sendable {
    private struct State {
        var locked = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    func withLock<Result: Sendable>(_ body: () async throws -> Result) async throws -> Result {
        await acquire()
        defer { release() }
        return try await body()
    }

    private func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = state.withLock { state -> Bool in
                guard state.locked else {
                    state.locked = true
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if granted { continuation.resume() }
        }
    }

    private func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiters.isEmpty else {
                state.locked = false
                return nil
            }
            // Ownership passes straight to the next waiter: the lock stays taken.
            return state.waiters.removeFirst()
        }
        next?.resume()
    }
}
