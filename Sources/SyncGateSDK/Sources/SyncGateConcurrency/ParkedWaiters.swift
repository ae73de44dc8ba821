/// Tasks parked until a condition holds, each leaving by its ticket when its task is cancelled:
/// the waiting half of ``AsyncLock`` and ``Latch``, kept inside their own state's mutex.
struct ParkedWaiters: Sendable {
    typealias Continuation = CheckedContinuation<Void, any Error>

    private var lastTicket = 0
    private var parked: [(ticket: Int, continuation: Continuation)] = []

    var count: Int { parked.count }

    mutating func removeFirst() -> Continuation? {
        parked.isEmpty ? nil : parked.removeFirst().continuation
    }

    mutating func removeAll() -> [Continuation] {
        defer { parked = [] }
        return parked.map(\.continuation)
    }

    private enum Decision { case goOn, cancelled, parked }

    /// Returns at once if `goesOn` (run under the lock, with the state) says so, or else once the
    /// parked task is resumed; throws `CancellationError` if the task is cancelled first (then it
    /// has left the queue, and `goesOn` did not run or said no).
    static func wait<State>(
        in mutex: Locked<State>, at waiters: any WritableKeyPath<State, ParkedWaiters> & Sendable,
        goesOn: (inout State) -> Bool
    ) async throws {
        let ticket = mutex.update { state -> Int in
            state[keyPath: waiters].lastTicket += 1
            return state[keyPath: waiters].lastTicket
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: Continuation) in
                let decision = mutex.update { state -> Decision in
                    // Cancelled before it could park: the cancellation handler found nothing to remove.
                    if Task.isCancelled { return .cancelled }
                    if goesOn(&state) { return .goOn }
                    state[keyPath: waiters].parked.append((ticket, continuation))
                    return .parked
                }
                switch decision {
                case .goOn: continuation.resume()
                case .cancelled: continuation.resume(throwing: CancellationError())
                case .parked: break
                }
            }
        } onCancel: {
            let parked = mutex.update { state -> Continuation? in
                guard let index = state[keyPath: waiters].parked.firstIndex(where: { $0.ticket == ticket }) else { return nil }
                return state[keyPath: waiters].parked.remove(at: index).continuation
            }
            parked?.resume(throwing: CancellationError())
        }
    }
}
