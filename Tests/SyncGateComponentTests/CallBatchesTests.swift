import Synchronization
import SyncGateRuntime
import SyncGateTestSupport
import Testing

/// Calls batched as a database batches commits: a request goes alone while a slot is free, and
/// the requests asked for while the calls hold every slot go together in the next call. Each test
/// holds a call on a gate, so the order of events is the test's, not the scheduler's.
@Suite(.timeLimit(.minutes(10))) struct CallBatchesTests {
    struct Refused: Error {}

    /// The requests of each call, in the order the calls began.
    final class Calls: Sendable {
        private let calls = Mutex<[[Int]]>([])
        var all: [[Int]] { calls.withLock { $0 } }

        /// Records a call; whether it is the first.
        func record(_ requests: [Int]) -> Bool {
            calls.withLock { calls in
                calls.append(requests)
                return calls.count == 1
            }
        }
    }

    /// A call that records its requests and, the first time, waits for `gate`.
    private static func batches(maximumBatch: Int = 64, holdingFirstOn gate: TestGate, calls: Calls, failFirst: Bool = false)
        -> CallBatches<Int, Int>
    {
        CallBatches(slots: 1, maximumBatch: maximumBatch) { requests in
            if calls.record(requests) {
                try await gate.wait()
                if failFirst { throw Refused() }
            }
            return requests.map { $0 * 10 }
        }
    }

    @Test func requestsAskedForDuringACallGoTogetherInTheNext() async throws {
        let gate = TestGate("the first call")
        let calls = Calls()
        let batches = Self.batches(holdingFirstOn: gate, calls: calls)
        let first = Task { try await batches.submit(1) }
        try await eventually("the first call on its way") { calls.all.count == 1 }
        let later = (2...4).map { request in Task { try await batches.submit(request) } }
        try await eventually("three requests waiting") { batches.waitingCount == 3 }
        #expect(calls.all.count == 1, "nothing more is called while the slot is taken")
        gate.open()
        #expect(try await first.value == 10)
        for (request, task) in zip(2...4, later) { #expect(try await task.value == request * 10, "each its own answer") }
        #expect(calls.all.map { $0.sorted() } == [[1], [2, 3, 4]])
        #expect(batches.waitingCount == 0)
    }

    @Test func aCallTakesAtMostMaximumBatch() async throws {
        let gate = TestGate("the first call")
        let calls = Calls()
        let batches = Self.batches(maximumBatch: 2, holdingFirstOn: gate, calls: calls)
        let first = Task { try await batches.submit(1) }
        try await eventually("the first call on its way") { calls.all.count == 1 }
        let later = (2...4).map { request in Task { try await batches.submit(request) } }
        try await eventually("three requests waiting") { batches.waitingCount == 3 }
        gate.open()
        _ = try await first.value
        for task in later { _ = try await task.value }
        #expect(calls.all.map(\.count) == [1, 2, 1])
    }

    /// A failed call fails its own requests, and only them: the next call serves the others.
    @Test func aFailedCallFailsItsOwnRequestsOnly() async throws {
        let gate = TestGate("the failing call")
        let calls = Calls()
        let batches = Self.batches(holdingFirstOn: gate, calls: calls, failFirst: true)
        let failing = Task { try await batches.submit(1) }
        try await eventually("the first call on its way") { calls.all.count == 1 }
        let next = Task { try await batches.submit(2) }
        try await eventually("a request waiting") { batches.waitingCount == 1 }
        gate.open()
        await #expect(throws: Refused.self) { try await failing.value }
        #expect(try await next.value == 20)
    }

    @Test func aCallAnsweringFewerRequestsThanItTookFailsThem() async throws {
        let batches = CallBatches<Int, Int>(slots: 1, maximumBatch: 64) { _ in [] }
        await #expect(throws: CallBatches<Int, Int>.MismatchedAnswers.self) { try await batches.submit(1) }
    }
}
