import SyncGateConcurrency

/// The current ``SyncStatus`` and its subscribers: each update that changes the value reaches
/// every subscriber, which keeps only the newest value it has not read yet.
final class StatusCenter: Sendable {
    private struct State {
        var status: SyncStatus
        var subscribers: [Int: AsyncStream<SyncStatus>.Continuation] = [:]
        var nextID = 0
    }

    private let state: Locked<State>

    init(_ initial: SyncStatus) {
        state = Locked(State(status: initial))
    }

    var status: SyncStatus { state.value.status }

    /// Changes the status; subscribers hear of it if it differs.
    @discardableResult
    func update<Result>(_ change: (inout SyncStatus) -> Result) -> Result {
        state.update { state in
            var status = state.status
            let result = change(&status)
            guard status != state.status else { return result }
            state.status = status
            // Yielded under the lock, so that every subscriber sees the updates in order.
            for subscriber in state.subscribers.values { subscriber.yield(status) }
            return result
        }
    }

    /// The status now, then each change, until the subscriber stops iterating or ``finish()``.
    func subscribe() -> AsyncStream<SyncStatus> {
        let (stream, continuation) = AsyncStream.makeStream(of: SyncStatus.self, bufferingPolicy: .bufferingNewest(1))
        let id = state.update { state -> Int? in
            guard state.nextID >= 0 else { return nil }
            state.nextID += 1
            state.subscribers[state.nextID] = continuation
            continuation.yield(state.status)
            return state.nextID
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.update { _ = $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Ends every subscription; later ones end at once.
    func finish() {
        let subscribers = state.update { state -> [AsyncStream<SyncStatus>.Continuation] in
            defer { state.subscribers = [:]; state.nextID = -1 }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.finish() }
    }
}
