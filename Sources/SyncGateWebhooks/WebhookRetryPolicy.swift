/// When a failed delivery is tried again, and when its subscription is paused instead: pure, so
/// that tests and the docs' table come from one place.
package struct WebhookRetryPolicy: Sendable, Hashable {
    /// The wait after each failed attempt; past the last, the subscription is paused. The default
    /// follows Standard Webhooks' example schedule (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h):
    /// about 27 hours of retries.
    package var delays: [Duration]
    /// Each wait is drawn from ±`jitter` of its nominal length, so that receivers that came back
    /// are not hit by every sender at once.
    package var jitter: Double

    package static let standard = WebhookRetryPolicy(
        delays: [.seconds(5), .seconds(300), .seconds(1800), .seconds(7200), .seconds(18_000), .seconds(36_000), .seconds(36_000)], jitter: 0.2
    )

    package init(delays: [Duration], jitter: Double) {
        self.delays = delays
        self.jitter = jitter
    }

    /// What to do after attempt number `attempts` (1 for the first) failed at `now`
    /// (milliseconds since the epoch); `unit` in 0..<1 draws the jitter.
    package func afterFailure(attempts: Int, error: String, now: Int64, unit: Double) -> WebhookOutcomeDecision {
        guard attempts >= 1, attempts <= delays.count else { return .pause }
        let (seconds, attoseconds) = delays[attempts - 1].components
        let nominal = Double(seconds) * 1000 + Double(attoseconds) / 1e15
        let factor = 1 - jitter + 2 * jitter * min(max(unit, 0), 1)
        return .retry(at: now + Int64((nominal * factor).rounded()))
    }

    /// Whether an answer's status means delivered: any 2xx.
    package static func delivered(status: Int) -> Bool { (200..<300).contains(status) }
}

/// ``WebhookRetryPolicy``'s answer to a failed attempt.
package enum WebhookOutcomeDecision: Sendable, Hashable {
    case retry(at: Int64)
    case pause
}
