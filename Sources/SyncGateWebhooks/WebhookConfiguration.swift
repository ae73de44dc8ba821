/// How a worker process delivers change webhooks (docs/webhooks.md lists the settings).
package struct WebhookConfiguration: Sendable {
    /// Whether this process announces and sends (a worker does by default; without subscriptions
    /// a pass is one small query).
    package var enabled = true
    /// Receivers on loopback, link-local and private addresses are refused unless this is set.
    package var allowPrivateAddresses = false
    /// One attempt, from connecting to the end of the answer, at most this long.
    package var timeout: Duration = .seconds(10)
    /// Of an answer's body, at most this much is read; the rest is dropped.
    package var maximumResponseBytes = 64 * 1024
    /// Attempts in flight in this process, and of one subscription (a slow receiver never takes
    /// every slot).
    package var concurrency = 16
    package var perSubscription = 8
    /// How often an idle process looks for changes and due retries without being woken.
    package var pollInterval: Duration = .seconds(1)
    /// How long a claimed attempt may run before another sender may take it (a sender that died).
    package var leaseMilliseconds: Int64 = 30_000
    package var retry = WebhookRetryPolicy.standard
    /// Announcer passes are at least this far apart: changes of a busy feed wait up to this long
    /// to share a message (docs/performance-log.md: at 100 ms a message carried about one push).
    package var announceInterval: Duration = .seconds(1)
    /// One announcer batch: feeds, and changes of each feed (one request at most).
    package var announceFeeds = 200
    package var announceChanges = 100
    /// Delivered deliveries are kept this long for `admin webhooks replay`.
    package var replayWindowMilliseconds: Int64 = 7 * 86_400_000
    /// How often the delivered ones past the window are deleted and the backlog sampled.
    package var housekeepingInterval: Duration = .seconds(10)

    package init() {}
}
