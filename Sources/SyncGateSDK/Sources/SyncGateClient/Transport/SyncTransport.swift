import SyncGateWire
/// The HTTP exchange the client needs, as a seam: the client speaks the protocol through it, so
/// an app can bring its own networking and tests can drop, repeat or delay exchanges.
///
/// ``URLSessionTransport`` is the implementation on `URLSession`, the default. An implementation sends
/// what it is given and reports what came back, including error statuses; it throws only when
/// no answer arrived.
public protocol SyncTransport: Sendable {
    /// Sends a request and collects the whole answer.
    func send(_ request: TransportRequest) async throws -> TransportResponse
    /// Sends a request whose answer is a stream (server-sent events); the body arrives in chunks
    /// until the server ends it or the calling task is cancelled.
    func stream(_ request: TransportRequest) async throws -> TransportStream
}

/// An HTTP request relative to the server's base URL.
public struct TransportRequest: Sendable, Hashable {
    /// `GET`, `POST`, `PUT` or `DELETE`.
    public var method: String
    /// The path and query, e.g. `/v1/sync/pull?cursor=abc`.
    public var path: String
    /// Header fields; names are lowercase.
    public var headers: [String: String]
    /// The body, for `POST`.
    public var body: [UInt8]?
    /// How long the exchange may go without progress: for a request, until its answer (the
    /// server sends nothing before answering a long-poll); for a stream, between two chunks.
    public var timeout: Duration

    /// Makes a request.
    public init(method: String, path: String, headers: [String: String] = [:], body: [UInt8]? = nil, timeout: Duration) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.timeout = timeout
    }
}

/// A complete HTTP answer.
public struct TransportResponse: Sendable, Hashable {
    /// The status code.
    public var status: Int
    /// Header fields; names are lowercase.
    public var headers: [String: String]
    /// The body.
    public var body: [UInt8]

    /// Makes an answer.
    public init(status: Int, headers: [String: String] = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// A streamed HTTP answer.
public struct TransportStream: Sendable {
    /// The status code.
    public var status: Int
    /// Header fields; names are lowercase.
    public var headers: [String: String]
    /// The body as it arrives.
    public var body: AsyncThrowingStream<[UInt8], any Error>

    /// Makes a streamed answer.
    public init(status: Int, headers: [String: String] = [:], body: AsyncThrowingStream<[UInt8], any Error>) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}
