import SyncGateWire
/// An error of the SyncGate client.
///
/// Sync errors say whether trying again later can help (``isRetryable``) and how long the server
/// asked to wait (``retryAfter``). Live sync retries them by itself with ``Backoff``.
public struct SyncGateClientError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, broadly. New codes may be added.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// The code's name.
        public var description: String { name }

        /// The server could not be reached, or the connection failed before an answer arrived.
        public static let transport = Code("transport")
        /// The server answered with an error status (see ``SyncGateClientError/httpStatus`` and
        /// ``SyncGateClientError/serverCode``).
        public static let server = Code("server")
        /// The server refused the token, also after the token provider gave a fresh one.
        public static let unauthenticated = Code("unauthenticated")
        /// The token provider threw.
        public static let tokenUnavailable = Code("tokenUnavailable")
        /// An answer that does not follow the protocol.
        public static let unexpectedAnswer = Code("unexpectedAnswer")
        /// A write to a type the server derives (e.g. `dailySummaries`).
        public static let readOnlyType = Code("readOnlyType")
        /// An argument the client cannot use (an empty type or id, a device id with other
        /// characters, a value that does not encode as a JSON object).
        public static let invalidArgument = Code("invalidArgument")
        /// A patch of an entity this device does not have.
        public static let notFound = Code("notFound")
        /// The server asked for a fresh start again and again within one sync.
        public static let resyncLoop = Code("resyncLoop")
        /// The local database failed.
        public static let localStore = Code("localStore")
        /// The client was closed (or signed out).
        public static let closed = Code("closed")
        /// ``SyncClient/syncOnce(deadline:)`` ran out of time; what it had pushed stays pushed.
        public static let deadlineExceeded = Code("deadlineExceeded")
        /// A read by id found the entity in more than one household: name the household.
        public static let ambiguous = Code("ambiguous")
    }

    /// What went wrong.
    public var code: Code
    /// A description for logs; it never holds document contents or tokens.
    public var message: String
    /// The HTTP status, for ``Code/server`` and ``Code/unauthenticated``.
    public var httpStatus: Int?
    /// The protocol's error code (`RATE_LIMITED`, `VALIDATION_ERROR`, …) when the server sent one.
    public var serverCode: String?
    /// How long the server asked to wait (`Retry-After`).
    public var retryAfter: Duration?

    /// Makes an error.
    public init(_ code: Code, _ message: String, httpStatus: Int? = nil, serverCode: String? = nil, retryAfter: Duration? = nil) {
        self.code = code
        self.message = message
        self.httpStatus = httpStatus
        self.serverCode = serverCode
        self.retryAfter = retryAfter
    }

    /// Whether the same request may succeed later: transport failures, 429 and 5xx answers, and
    /// a token provider that failed.
    public var isRetryable: Bool {
        switch code {
        case .transport, .tokenUnavailable: return true
        case .server: return (httpStatus ?? 0) == 429 || (httpStatus ?? 0) >= 500
        default: return false
        }
    }

    /// The code, the message and the HTTP status.
    public var description: String {
        var text = "SyncGateClientError.\(code): \(message)"
        if let httpStatus { text += " (HTTP \(httpStatus)\(serverCode.map { " \($0)" } ?? ""))" }
        return text
    }
}

extension SyncGateClientError {
    /// An answer to a push after which the cycle still pulls: an error status, or an answer
    /// that is not the protocol's (a proxy's page), unless the server asked for time (`429`,
    /// `503`, `Retry-After`).
    var pullsAnyway: Bool {
        switch code {
        case .server: retryAfter == nil && httpStatus != 429 && httpStatus != 503
        case .unexpectedAnswer: true
        default: false
        }
    }
}
