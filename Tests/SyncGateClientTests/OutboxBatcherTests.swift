import Testing

@testable import SyncGateClient

@Suite("Choosing the next batch", .timeLimit(.minutes(10)))
struct OutboxBatcherTests {
    func entry(_ sequence: Int64, _ key: EntityKey = .milk, state: OutboxEntry.State = .pending, follows: Bool = false, size: Int = 0) -> OutboxEntry {
        OutboxEntry(
            sequence: sequence, idempotencyKey: "k\(sequence)", key: key, intent: .update,
            data: size > 0 ? ["blob": .string(String(repeating: "x", count: size))] : ["q": 1],
            baseVersion: 1, followsPending: follows, clientTimestamp: 0, state: state
        )
    }

    let roomy = OutboxBatcher.Limits(operations: 100, bytes: 1 << 20)

    @Test("the batch is the outbox in order, sent entries first as they are, acknowledged ones skipped")
    func order() {
        let outbox = [
            entry(1, .milk, state: .acknowledged(version: 3, epoch: 1, jobID: nil)), entry(2, .eggs, state: .sent(jobID: nil)), entry(3, .weight), entry(4, .milk),
        ]
        #expect(OutboxBatcher.next(outbox, limits: roomy) == .push([outbox[1], outbox[2], outbox[3]]))
    }

    @Test("the batch stops before a write that waits for an earlier result, keeping the outbox order")
    func stopsAtFollower() {
        let outbox = [entry(1, .milk, state: .sent(jobID: nil)), entry(2, .eggs), entry(3, .milk, follows: true), entry(4, .weight)]
        #expect(OutboxBatcher.next(outbox, limits: roomy) == .push([outbox[0], outbox[1]]))
        #expect(OutboxBatcher.next([entry(1, follows: true)], limits: roomy) == .idle)
    }

    @Test("a job waiting for its result is followed before anything is pushed")
    func followsJobs() {
        let outbox = [entry(1), entry(2, .eggs, state: .sent(jobID: "42"))]
        #expect(OutboxBatcher.next(outbox, limits: roomy) == .follow(jobID: "42"))
    }

    @Test("limits: operation count and bytes; the first write goes even when it alone is over the byte limit")
    func limits() {
        let outbox = (1...10).map { entry(Int64($0), EntityKey(entityType: "t", entityID: "\($0)"), size: 1000) }
        guard case .push(let byCount) = OutboxBatcher.next(outbox, limits: .init(operations: 3, bytes: 1 << 20)) else { Issue.record(); return }
        #expect(byCount.map(\.sequence) == [1, 2, 3])
        guard case .push(let byBytes) = OutboxBatcher.next(outbox, limits: .init(operations: 100, bytes: 3000)) else { Issue.record(); return }
        #expect(byBytes.map(\.sequence) == [1, 2])
        guard case .push(let huge) = OutboxBatcher.next(outbox, limits: .init(operations: 100, bytes: 10)) else { Issue.record(); return }
        #expect(huge.map(\.sequence) == [1])
        #expect(OutboxBatcher.next([], limits: roomy) == .idle)
    }
}
