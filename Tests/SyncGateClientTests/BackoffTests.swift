import Testing

@testable import SyncGateClient

@Suite("Backoff", .timeLimit(.minutes(10)))
struct BackoffTests {
    let policy = Backoff(initial: .milliseconds(500), maximum: .seconds(60), jitter: 0.5)

    @Test("exponential between half and all of initial × 2^(n-1), capped at the maximum")
    func bounds() {
        var random = SplitMix64(seed: 1)
        for failures in 1...40 {
            let full = min(0.5 * Double(1 << min(failures - 1, 30)), 60)
            for _ in 0..<200 {
                let delay = policy.delay(afterFailures: failures, using: &random)
                #expect(delay >= .seconds(full / 2) && delay <= .seconds(full), "failures \(failures): \(delay)")
            }
        }
    }

    @Test("jitter spreads devices that failed together")
    func spread() {
        var random = SplitMix64(seed: 2)
        let delays = Set((0..<100).map { _ in policy.delay(afterFailures: 4, using: &random) })
        #expect(delays.count > 90)
    }

    @Test("never sooner than Retry-After, and at most a second of jitter beyond it when it dominates")
    func retryAfter() {
        var random = SplitMix64(seed: 3)
        for retry in [1, 2, 5, 30, 120] {
            for failures in 1...3 {
                for _ in 0..<200 {
                    let delay = policy.delay(afterFailures: failures, retryAfter: .seconds(retry), using: &random)
                    #expect(delay >= .seconds(retry))
                    let exponential = min(0.5 * Double(1 << (failures - 1)), 60)
                    #expect(delay <= .seconds(max(Double(retry) + min(Double(retry) * 0.5, 1), exponential)))
                }
            }
        }
    }

    @Test("a zero Retry-After does not shorten the exponential delay")
    func zeroRetryAfter() {
        var random = SplitMix64(seed: 4)
        for _ in 0..<100 {
            #expect(policy.delay(afterFailures: 5, retryAfter: .zero, using: &random) >= .seconds(4))
        }
    }

    @Test("the same seed gives the same delays")
    func deterministic() {
        var first = SplitMix64(seed: 9)
        var second = SplitMix64(seed: 9)
        #expect((1...10).map { policy.delay(afterFailures: $0, using: &first) } == (1...10).map { policy.delay(afterFailures: $0, using: &second) })
    }

    @Test("jitter 0 is plain exponential; the configuration clamps jitter to 0...1")
    func noJitter() {
        var random = SplitMix64(seed: 5)
        let exact = Backoff(initial: .seconds(1), maximum: .seconds(10), jitter: 0)
        #expect((1...6).map { exact.delay(afterFailures: $0, using: &random) } == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(10), .seconds(10)])
        #expect(Backoff(jitter: 7).jitter == 1)
        // A zero policy still waits: 100 ms, or its maximum when less, never under 10 ms.
        #expect(Backoff(initial: .zero, jitter: 0).delay(afterFailures: 1, using: &random) == .milliseconds(100))
        #expect(Backoff(initial: .zero, maximum: .milliseconds(50), jitter: 0).delay(afterFailures: 3, using: &random) == .milliseconds(50))
        #expect(Backoff(initial: .zero, maximum: .zero, jitter: 0).delay(afterFailures: 1, using: &random) == .milliseconds(10))
        #expect(Backoff(jitter: -1).jitter == 0)
    }
}
