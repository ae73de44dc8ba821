public import Foundation
#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif
import SyncGateConcurrency

/// ``SyncTransport`` on `URLSession`: the default on every platform (FoundationNetworking on
/// Linux), so requests follow the system's proxy, certificate and Low Data Mode settings.
public final class URLSessionTransport: SyncTransport {
    /// The server, e.g. `https://sync.example.com`.
    public let baseURL: URL
    private let configuration: URLSessionConfiguration
    private let session: URLSession
    private let base: String

    /// A transport to `baseURL` with a copy of `configuration` (by default `.default`) that keeps
    /// no answers and no cookies: a user's documents must not outlive sign-out in `URLCache`. The
    /// client's own timeouts apply per request.
    public init(baseURL: URL, configuration: URLSessionConfiguration = .default) {
        self.baseURL = baseURL
        let configuration = configuration.copy() as! URLSessionConfiguration
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        self.configuration = configuration
        let text = baseURL.absoluteString
        base = text.hasSuffix("/") ? String(text.dropLast()) : text
        session = URLSession(configuration: configuration)
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    /// Sends the request and collects the whole answer. A cancelled call returns at once with
    /// `CancellationError`.
    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        let outgoing = try makeRequest(request)
        let exchange = Exchange()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<TransportResponse, any Error>) in
                let task = session.dataTask(with: outgoing) { data, response, error in
                    if let error {
                        exchange.finish(.failure(error))
                    } else if let response = response as? HTTPURLResponse {
                        exchange.finish(.success(TransportResponse(status: response.statusCode, headers: Self.headers(response), body: Array(data ?? Data()))))
                    } else {
                        exchange.finish(.failure(URLError(.badServerResponse)))
                    }
                }
                if exchange.start(continuation, task: task) { task.resume() }
            }
        } onCancel: {
            exchange.cancel()
        }
    }

    /// Sends the request and streams the answer's body until the server ends it or the reading
    /// task is cancelled.
    public func stream(_ request: TransportRequest) async throws -> TransportStream {
        let outgoing = try makeRequest(request)
        let reader = StreamReader()
        // A session of its own per stream: its delegate gets the body as it arrives.
        let streaming = URLSession(configuration: configuration, delegate: reader, delegateQueue: nil)
        let task = streaming.dataTask(with: outgoing)
        let head = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HTTPURLResponse, any Error>) in
                if reader.start(head: continuation, task: task) {
                    task.resume()
                } else {
                    streaming.finishTasksAndInvalidate()
                }
            }
        } onCancel: {
            reader.cancel()
        }
        reader.continuation.onTermination = { _ in reader.cancel() }
        return TransportStream(status: head.statusCode, headers: Self.headers(head), body: reader.body)
    }

    private func makeRequest(_ request: TransportRequest) throws -> URLRequest {
        guard let url = URL(string: base + request.path) else {
            throw SyncGateClientError(.invalidArgument, "not a URL: \(base + request.path)")
        }
        var outgoing = URLRequest(url: url)
        outgoing.httpMethod = request.method
        for (name, value) in request.headers {
            outgoing.setValue(value, forHTTPHeaderField: name)
        }
        outgoing.httpBody = request.body.map { Data($0) }
        outgoing.timeoutInterval = max(1, request.timeout.timeInterval)
        outgoing.cachePolicy = .reloadIgnoringLocalCacheData
        return outgoing
    }

    private static func headers(_ response: HTTPURLResponse) -> [String: String] {
        var fields: [String: String] = [:]
        for (name, value) in response.allHeaderFields {
            if let name = name as? String, let value = value as? String { fields[name.lowercased()] = value }
        }
        return fields
    }
}

/// One request's continuation, resumed once: by the answer, or at once by cancellation.
private final class Exchange: Sendable {
    private let state = Locked<(continuation: CheckedContinuation<TransportResponse, any Error>?, task: URLSessionDataTask?, cancelled: Bool)>(
        (nil, nil, false)
    )

    /// Whether to start the task: not if the call was cancelled already (then it has thrown).
    func start(_ continuation: CheckedContinuation<TransportResponse, any Error>, task: URLSessionDataTask) -> Bool {
        let cancelled = state.update { state -> Bool in
            if !state.cancelled { state = (continuation, task, false) }
            return state.cancelled
        }
        if cancelled { continuation.resume(throwing: CancellationError()) }
        return !cancelled
    }

    func finish(_ result: Result<TransportResponse, any Error>) {
        let continuation = state.update { state in
            defer { state.continuation = nil; state.task = nil }
            return state.continuation
        }
        continuation?.resume(with: result)
    }

    func cancel() {
        let (continuation, task) = state.update { state in
            defer { state = (nil, nil, true) }
            return (state.continuation, state.task)
        }
        continuation?.resume(throwing: CancellationError())
        #if canImport(FoundationNetworking)
        // Not cancelled on Linux: FoundationNetworking traps when a task is cancelled as it
        // completes ("a task that is not in the registry"). The request runs to its answer (a
        // long-poll's wait at most) and the answer is dropped.
        _ = task
        #else
        task?.cancel()
        #endif
    }
}

/// The delegate of one streamed answer: the head resumes the caller, the body goes to a stream.
///
/// Cancelled by the caller (before the head, or by ending the body), it returns or ends at once
/// and cancels the task, unless the task completed (FoundationNetworking traps when a task is
/// cancelled as it completes; an event stream that opened does not complete by itself).
private final class StreamReader: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private struct State {
        var head: CheckedContinuation<HTTPURLResponse, any Error>?
        /// The running task; `nil` before it starts and once it completed.
        var task: URLSessionDataTask?
        var cancelled = false
    }

    let body: AsyncThrowingStream<[UInt8], any Error>
    let continuation: AsyncThrowingStream<[UInt8], any Error>.Continuation
    private let state = Locked(State())

    override init() {
        (body, continuation) = AsyncThrowingStream.makeStream(of: [UInt8].self)
    }

    /// Whether to start the task: not if the caller was cancelled already (then it has thrown).
    func start(head: CheckedContinuation<HTTPURLResponse, any Error>, task: URLSessionDataTask) -> Bool {
        let cancelled = state.update { state -> Bool in
            if !state.cancelled { state = State(head: head, task: task) }
            return state.cancelled
        }
        if cancelled { head.resume(throwing: CancellationError()) }
        return !cancelled
    }

    func cancel() {
        let (head, task) = state.update { state in
            defer { state.head = nil; state.cancelled = true }
            return (state.head, state.task)
        }
        head?.resume(throwing: CancellationError())
        continuation.finish()
        task?.cancel()
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        let (waiting, cancelled) = state.update { state in
            defer { state.head = nil }
            return (state.head, state.cancelled)
        }
        if let response = response as? HTTPURLResponse, !cancelled {
            waiting?.resume(returning: response)
            completionHandler(.allow)
        } else {
            waiting?.resume(throwing: cancelled ? CancellationError() : URLError(.badServerResponse))
            completionHandler(.cancel)
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        continuation.yield(Array(data))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let waiting = state.update { state in
            defer { state.head = nil; state.task = nil }
            return state.head
        }
        waiting?.resume(throwing: error ?? URLError(.networkConnectionLost))
        if let error {
            continuation.finish(throwing: error)
        } else {
            continuation.finish()
        }
        session.finishTasksAndInvalidate()
    }
}
