import Synchronization

/// Calls that each serve many requests, batched as a database batches commits: a request goes at
/// once while fewer than `slots` calls are on their way, and otherwise waits for one to end and
/// goes with every request asked for meanwhile (`maximumBatch` at most a call). So an idle
/// caller's request goes alone, as it would unbatched, and a busy caller's share a call.
package final class CallBatches<Request: Sendable, Answer: Sendable>: Sendable {
    /// Answers `requests`, one answer each, in their order.
    package typealias Call = @Sendable (_ requests: [Request]) async throws -> [Answer]

    /// A call answered a different number of requests than it was given.
    package struct MismatchedAnswers: Error, CustomStringConvertible {
        package var requests: Int
        package var answers: Int
        package var description: String { "\(answers) answers to \(requests) requests" }
    }

    private struct Waiting {
        var requests: [Request] = []
        var continuations: [CheckedContinuation<Answer, any Error>] = []
    }

    private struct State {
        var running = 0
        var waiting = Waiting()
        var calls = 0
    }

    private let call: Call
    private let slots: Int
    private let maximumBatch: Int
    private let state = Mutex(State())

    package init(slots: Int, maximumBatch: Int, call: @escaping Call) {
        self.call = call
        self.slots = max(1, slots)
        self.maximumBatch = max(1, maximumBatch)
    }

    /// `request`'s answer, from a call alone or with others; the call's error if it failed.
    package func submit(_ request: Request) async throws -> Answer {
        try await withCheckedThrowingContinuation { continuation in
            let starts = state.withLock { state -> Bool in
                state.waiting.requests.append(request)
                state.waiting.continuations.append(continuation)
                guard state.running < slots else { return false }
                state.running += 1
                return true
            }
            if starts { Task { await self.drain() } }
        }
    }

    /// Requests waiting for a call.
    package var waitingCount: Int { state.withLock { $0.waiting.requests.count } }

    /// Calls begun so far.
    package var callCount: Int { state.withLock { $0.calls } }

    /// Calls with what is waiting, call after call, until nothing is; then frees its slot.
    private func drain() async {
        while true {
            let batch = state.withLock { state -> Waiting? in
                guard !state.waiting.requests.isEmpty else {
                    state.running -= 1
                    return nil
                }
                let count = min(maximumBatch, state.waiting.requests.count)
                state.calls += 1
                defer {
                    state.waiting.requests.removeFirst(count)
                    state.waiting.continuations.removeFirst(count)
                }
                return Waiting(requests: Array(state.waiting.requests.prefix(count)), continuations: Array(state.waiting.continuations.prefix(count)))
            }
            guard let batch else { return }
            do {
                let answers = try await call(batch.requests)
                guard answers.count == batch.requests.count else {
                    throw MismatchedAnswers(requests: batch.requests.count, answers: answers.count)
                }
                for (continuation, answer) in zip(batch.continuations, answers) { continuation.resume(returning: answer) }
            } catch {
                for continuation in batch.continuations { continuation.resume(throwing: error) }
            }
        }
    }
}
