import Testing

@testable import SyncGateCore
import SyncGateWire

@Suite(.timeLimit(.minutes(10))) struct RetryPolicyTests {
    let policy = RetryPolicy(maximumAttempts: 5, baseDelayMilliseconds: 1000, maximumDelayMilliseconds: 6000)

    @Test(arguments: [(1, 500, 1000), (2, 1000, 2000), (3, 2000, 4000), (4, 3000, 6000)])
    func delaysGrowExponentiallyWithinJitterBounds(_ attempts: Int, _ low: Int64, _ high: Int64) {
        #expect(policy.next(afterAttempts: attempts, jitter: 0) == .retry(afterMilliseconds: low))
        #expect(policy.next(afterAttempts: attempts, jitter: 1) == .retry(afterMilliseconds: high))
        for step in 0...10 {
            guard case .retry(let delay) = policy.next(afterAttempts: attempts, jitter: Double(step) / 10) else {
                Issue.record("expected a retry")
                return
            }
            #expect((low...high).contains(delay))
        }
    }

    @Test func attemptsRunOutIntoDead() {
        #expect(policy.next(afterAttempts: 5, jitter: 0.5) == .dead)
        #expect(policy.next(afterAttempts: 50, jitter: 0.5) == .dead)
        #expect(RetryPolicy(maximumAttempts: 1).next(afterAttempts: 1, jitter: 0) == .dead)
    }

    @Test func hugeAttemptCountsNeitherOverflowNorExceedTheCap() {
        let generous = RetryPolicy(maximumAttempts: .max, baseDelayMilliseconds: .max / 2, maximumDelayMilliseconds: 60_000)
        #expect(generous.next(afterAttempts: 10_000, jitter: 1) == .retry(afterMilliseconds: 60_000))
        #expect(generous.next(afterAttempts: 10_000, jitter: 7) == .retry(afterMilliseconds: 60_000))
    }

    @Test func deadJobResultsAreRetryableInternalErrors() {
        let operations = [Fixture.operation(.create, base: 0), Fixture.operation(.delete, key: "k2")]
        let results = OperationResult.deadJob(operations, attempts: 5)
        #expect(results.count == 2)
        for (result, operation) in zip(results, operations) {
            #expect(result.idempotencyKey == operation.idempotencyKey)
            guard case .rejected(let code, _, let retryable) = result.status else {
                Issue.record("expected a rejection")
                continue
            }
            #expect(code == "INTERNAL" && retryable)
            #expect(!result.isRecorded)
        }
    }

    @Test func resultsRoundTripThroughTheirWireForm() throws {
        let results: [OperationResult] = [
            .init(idempotencyKey: "a", entityType: "t", entityID: "1", status: .applied, version: 4),
            .init(idempotencyKey: "b", entityType: "t", entityID: "1", status: .duplicate, version: 4),
            .init(idempotencyKey: "c", entityType: "t", entityID: "1", status: .conflict(.serverWins), version: 7, serverData: ["x": 1]),
            .init(idempotencyKey: "d", entityType: "t", entityID: "1", status: .conflict(.serverWins), version: 7),
            .init(idempotencyKey: "e", entityType: "t", entityID: "1", status: .conflict(.clientWins), version: 8),
            .init(idempotencyKey: "f", entityType: "t", entityID: "1", status: .conflict(.merged), version: 8, mergedData: ["y": 2]),
            .rejected(Fixture.operation(.update), code: "PROJECT_ARCHIVED", message: "m", retryable: false),
        ]
        #expect(try JobCodec.decodeResults(JobCodec.encodeResults(results)) == results)
        // server_wins on a deleted entity says so explicitly.
        #expect(results[3].json["server_data"] == .null)
    }
}
