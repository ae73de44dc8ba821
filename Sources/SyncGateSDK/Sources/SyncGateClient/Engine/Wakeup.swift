import SyncGateWire
import SyncGateConcurrency
import Foundation

/// A sticky signal: ``signal()`` before anyone waits is not lost. Live sync waits on it for a
/// poke, a local write or a reconnection.
final class Wakeup: Sendable {
    private struct State {
        var signalled = false
        var waiters: [UUID: CheckedContinuation<Void, Never>] = [:]
    }

    private let state = Locked(State())

    func signal() {
        let waiters = state.update { state -> [CheckedContinuation<Void, Never>] in
            state.signalled = true
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        waiters.forEach { $0.resume() }
    }

    /// Forgets signals so far (their cause is about to be handled).
    func reset() {
        state.update { $0.signalled = false }
    }

    /// Returns once signalled (at once if it already is), or when the task is cancelled.
    func wait() async {
        let id = UUID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = state.update { state -> Bool in
                    if state.signalled || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            state.update { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }

    /// ``wait()`` for at most `timeout`; returns whether it was signalled.
    @discardableResult
    func wait(timeout: Duration) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await self.wait()
                return !Task.isCancelled
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }
}
