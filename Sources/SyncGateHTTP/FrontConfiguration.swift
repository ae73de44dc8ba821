package import SyncGateCore
import SyncGateWire
package import SyncGateStorage

/// Limits and timings of the HTTP front; every value is configurable.
package struct FrontConfiguration: Sendable {
    package var pushLimits: PushLimits
    /// Bodies above this size get `413 PAYLOAD_TOO_LARGE`.
    package var maximumBodyBytes: Int
    package var queueLimits: QueueLimits
    /// Attempts a job gets before it is `dead`.
    package var maximumAttempts: Int
    package var defaultPushWaitMilliseconds: Int
    package var maximumPushWaitMilliseconds: Int
    package var defaultPullLimit: Int
    package var maximumPullLimit: Int
    package var maximumPullWaitMilliseconds: Int
    /// The live waiters' safety net: once per interval the process reads the heads of every
    /// watched feed (one query, however many wait). A waiting push re-checks its job this often.
    package var pollInterval: Duration
    /// SSE keep-alive comment interval.
    package var keepAliveInterval: Duration
    /// `Retry-After` seconds for 429 and 503 answers.
    package var retryAfterSeconds: Int
    /// Caps on live connections (long-polls and event streams) per user and per process.
    package var liveLimits: WatchTable.Limits
    /// An event stream ends after this long even if its token is still valid.
    package var maximumStreamLifetime: Duration
    /// A request must arrive whole (head and body) within this long of its first line.
    package var requestReadTimeout: Duration
    /// A connection with no request in progress is closed after this long; it also bounds how
    /// long a request's head may take to arrive.
    package var idleTimeout: Duration
    /// `GET /metrics` on the public port; off when the metrics have a port of their own.
    package var servesMetrics: Bool
    /// How long a front trusts a service key it checked: a revoked key is refused within this.
    package var serviceKeyCacheTime: Duration

    package init(
        pushLimits: PushLimits = .init(),
        maximumBodyBytes: Int = 4 * 1024 * 1024,
        queueLimits: QueueLimits = .init(),
        maximumAttempts: Int = 5,
        defaultPushWaitMilliseconds: Int = 5000,
        maximumPushWaitMilliseconds: Int = 30_000,
        defaultPullLimit: Int = 500,
        maximumPullLimit: Int = 1000,
        maximumPullWaitMilliseconds: Int = 60_000,
        pollInterval: Duration = .seconds(1),
        keepAliveInterval: Duration = .seconds(15),
        retryAfterSeconds: Int = 2,
        liveLimits: WatchTable.Limits = .init(),
        maximumStreamLifetime: Duration = .seconds(3600),
        requestReadTimeout: Duration = .seconds(30),
        idleTimeout: Duration = .seconds(75),
        servesMetrics: Bool = true,
        serviceKeyCacheTime: Duration = .seconds(5)
    ) {
        self.pushLimits = pushLimits
        self.maximumBodyBytes = maximumBodyBytes
        self.queueLimits = queueLimits
        self.maximumAttempts = maximumAttempts
        self.defaultPushWaitMilliseconds = defaultPushWaitMilliseconds
        self.maximumPushWaitMilliseconds = maximumPushWaitMilliseconds
        self.defaultPullLimit = defaultPullLimit
        self.maximumPullLimit = maximumPullLimit
        self.maximumPullWaitMilliseconds = maximumPullWaitMilliseconds
        self.pollInterval = pollInterval
        self.keepAliveInterval = keepAliveInterval
        self.retryAfterSeconds = retryAfterSeconds
        self.liveLimits = liveLimits
        self.maximumStreamLifetime = maximumStreamLifetime
        self.requestReadTimeout = requestReadTimeout
        self.idleTimeout = idleTimeout
        self.servesMetrics = servesMetrics
        self.serviceKeyCacheTime = serviceKeyCacheTime
    }
}
