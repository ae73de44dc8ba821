/// A bearer token for a provider, reused until it is due for renewal. APNs refuses a token older
/// than an hour and one renewed more often than every 20 minutes; FCM's OAuth tokens expire after
/// the `expires_in` they are issued with.
package struct ProviderToken: Sendable, Hashable {
    package var value: String
    /// Milliseconds since the epoch.
    package var issuedAt: Int64
    /// From this time on a new one is signed or asked for.
    package var renewAt: Int64

    /// Whether to send it at `now`. A clock that went back before it was issued renews it too: the
    /// provider would count its age from a time that has not come.
    package func usable(at now: Int64) -> Bool { now >= issuedAt && now < renewAt }

    /// APNs: renewed after 50 minutes, inside Apple's 20 to 60.
    package static let apnsLifetime: Int64 = 50 * 60_000

    /// FCM: renewed 5 minutes before it expires (at least a minute after it is issued).
    package static func fcmRenewal(issuedAt: Int64, expiresInSeconds: Int64) -> Int64 {
        issuedAt + max(60, expiresInSeconds - 300) * 1000
    }
}

/// When a nudge that failed is tried again: exponential backoff with full jitter, at least what
/// the provider asked for, and a bounded number of attempts. A nudge given up is not lost for
/// good: the next change of a feed the device reads nudges it again.
package struct PushRetryPolicy: Sendable, Hashable {
    package var base: Int64 = 1000
    package var cap: Int64 = 300_000
    package var maximumAttempts = 8
    /// A provider's `Retry-After` is honoured up to this (milliseconds).
    package var retryAfterCap: Int64 = 3_600_000

    package init() {}

    /// Milliseconds to wait after failed attempt number `attempt` (1-based), or `nil` to give up.
    /// `random` is in `0..<1`.
    package func delay(afterAttempt attempt: Int, retryAfterSeconds: Int64?, random: Double) -> Int64? {
        guard attempt >= 1, attempt < maximumAttempts else { return nil }
        let ceiling = min(cap, base << min(attempt - 1, 30))
        let jittered = Int64(Double(ceiling) * min(max(random, 0), 1))
        let asked = retryAfterSeconds.map { min($0, retryAfterCap / 1000) * 1000 } ?? 0
        return max(jittered, asked)
    }
}
