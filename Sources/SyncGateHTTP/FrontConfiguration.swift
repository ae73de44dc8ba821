public import SyncGateCore
public import SyncGateStorage

/// Limits and timings of the HTTP front; every value is configurable.
public struct FrontConfiguration: Sendable {
    public var pushLimits: PushLimits
    /// Bodies above this size get `413 PAYLOAD_TOO_LARGE`.
    public var maximumBodyBytes: Int
    public var queueLimits: QueueLimits
    /// Attempts a job gets before it is `dead`.
    public var maximumAttempts: Int
    public var defaultPushWaitMilliseconds: Int
    public var maximumPushWaitMilliseconds: Int
    public var defaultPullLimit: Int
    public var maximumPullLimit: Int
    public var maximumPullWaitMilliseconds: Int
    /// Waiting requests re-check the database this often even without a notification.
    public var pollInterval: Duration
    /// SSE keep-alive comment interval.
    public var keepAliveInterval: Duration
    /// `Retry-After` seconds for 429 and 503 answers.
    public var retryAfterSeconds: Int

    public init(
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
        retryAfterSeconds: Int = 2
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
    }
}
