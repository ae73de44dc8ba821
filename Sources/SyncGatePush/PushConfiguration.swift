package import NIOSSL
import SyncGateConcurrency

/// How push nudges are sent (docs/push.md lists the settings). Without credentials for either
/// provider nudging is off: no process sends, and fronts publish no presence.
package struct PushConfiguration: Sendable {
    package var apns: APNsCredentials?
    package var fcm: FCMServiceAccount?
    package var fcmPriority: FCMPriority = .high
    /// Whether this process sends (a worker does by default, when credentials are configured).
    package var enabled = true
    /// At most one nudge per device per interval, however many changes.
    package var interval: Duration = .seconds(30)
    /// Nudges in flight in this process.
    package var concurrency = 32
    /// One request to a provider, connecting included.
    package var timeout: Duration = .seconds(10)
    /// How long a claimed nudge may be out before another nudger may send it (one that died).
    package var leaseMilliseconds: Int64 = 60_000
    package var retry = PushRetryPolicy()
    /// How often due nudges (coalesced, retried) are looked for without being woken.
    package var pollInterval: Duration = .seconds(1)
    /// How often every feed registered devices read is looked at, whatever was notified (a
    /// notification lost, a household joined).
    package var sweepInterval: Duration = .seconds(30)
    /// Passes over advanced feeds are at least this far apart at saturation.
    package var markInterval: Duration = .milliseconds(200)
    /// Feeds one pass takes.
    package var feedLimit = 500
    /// A front's presence heartbeat is valid this long; fronts renew it every third of it.
    package var presenceLifetime: Duration = .seconds(30)
    /// A nudge due while its device holds a live connection is looked at again this much later,
    /// and dropped only if the device still holds one: a front learns that a client vanished
    /// when it next writes to it (an event stream's keep-alive, every 15 s; a long-poll's answer,
    /// at once when the change wakes it).
    package var liveRecheck: Duration = .seconds(20)
    /// Tests: trust roots for a local mock, and the providers' base URLs.
    package var tls: TLSConfiguration?
    package var apnsBaseURL: (@Sendable (APNsEnvironment) -> String)?
    package var fcmBaseURL: String?

    package init() {}

    package var isConfigured: Bool { apns != nil || fcm != nil }

    package var intervalMilliseconds: Int64 { interval.wholeMilliseconds }
    package var liveRecheckMilliseconds: Int64 { liveRecheck.wholeMilliseconds }
    /// The lease outlasts an attempt (with its one renewed-credentials resend): a nudge still
    /// out is never taken by another nudger, which would send it twice.
    package var effectiveLeaseMilliseconds: Int64 { max(leaseMilliseconds, 2 * timeout.wholeMilliseconds + 5_000) }
}
