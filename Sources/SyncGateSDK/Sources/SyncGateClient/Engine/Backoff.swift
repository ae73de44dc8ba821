import SyncGateWire
import SyncGateConcurrency
/// How long to wait before trying again after a failure: exponential, jittered, and never
/// sooner than the server's `Retry-After`.
public struct Backoff: Sendable, Hashable {
    /// The delay after the first failure.
    public var initial: Duration
    /// The longest delay (before `Retry-After` and jitter).
    public var maximum: Duration
    /// The fraction of a delay that is random: 0.5 waits between half and all of it, so devices
    /// that failed together do not come back together.
    public var jitter: Double

    /// A policy; the defaults suit a mobile app talking to one server.
    public init(initial: Duration = .milliseconds(500), maximum: Duration = .seconds(60), jitter: Double = 0.5) {
        self.initial = initial
        self.maximum = maximum
        self.jitter = min(max(jitter, 0), 1)
    }

    /// The delay after `failures` consecutive failures (1 for the first).
    ///
    /// The exponential delay `initial × 2^(failures-1)`, capped at `maximum`, loses a random
    /// part of up to `jitter` of itself; the result is at least 100 ms (or `maximum` when that is
    /// less, but never under 10 ms). With `retryAfter`, the delay is at least `retryAfter`
    /// plus a random part of up to `jitter` of it (capped at one second), so a server asking for
    /// breathing room gets it and its clients do not return in lockstep.
    public func delay(afterFailures failures: Int, retryAfter: Duration? = nil, using random: inout some RandomNumberGenerator) -> Duration {
        let exponent = min(max(failures - 1, 0), 62)
        let cap = maximum.timeInterval
        // Never next to nothing, whatever the policy says: a zero delay retries in a tight loop.
        let least = max(min(0.1, cap), 0.01)
        let exponential = min(initial.timeInterval * pow2(exponent), cap)
        let jittered = max(exponential * (1 - jitter * Double.random(in: 0..<1, using: &random)), least)
        guard let retryAfter else { return .seconds(jittered) }
        let floor = retryAfter.timeInterval
        let spread = min(floor * jitter, 1)
        let honoured = floor + spread * Double.random(in: 0..<1, using: &random)
        return .seconds(max(jittered, honoured))
    }

    /// ``delay(afterFailures:retryAfter:using:)`` with the system's random numbers.
    public func delay(afterFailures failures: Int, retryAfter: Duration? = nil) -> Duration {
        var random = SystemRandomNumberGenerator()
        return delay(afterFailures: failures, retryAfter: retryAfter, using: &random)
    }

    private func pow2(_ exponent: Int) -> Double {
        var value = 1.0
        for _ in 0..<exponent {
            value *= 2
            if value > 1e12 { break }
        }
        return value
    }
}
