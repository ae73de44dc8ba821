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
    /// The session's settings (every request and stream is made with them).
    public let configuration: URLSessionConfiguration
    private let session: URLSession
    private let base: String

    /// A transport to `baseURL` with `configuration` (by default `.default`; the client's own
    /// timeouts apply per request).
    public init(baseURL: URL, configuration: URLSessionConfiguration = .default) {
        self.baseURL = baseURL
        self.configuration = configuration
        let text = baseURL.absoluteString
        base = text.hasSuffix("/") ? String(text.dropLast()) : text
        session = URLSession(configuration: configuration)
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    /// Sends the request and collects the whole answer.
    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        let outgoing = try makeRequest(request)
        // A data task with a completion handler, cancelled with the calling task: `data(for:)`
        // does not stop on cancellation in every Foundation.
        let task = Locked<URLSessionDataTask?>(nil)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<TransportResponse, any Error>) in
                let dataTask = session.dataTask(with: outgoing) { data, response, error in
                    if let error {
                        continuation.resume(throwing: Self.failure(error))
                    } else if let response = response as? HTTPURLResponse {
                        continuation.resume(returning: TransportResponse(status: response.statusCode, headers: Self.headers(response), body: Array(data ?? Data())))
                    } else {
                        continuation.resume(throwing: URLError(.badServerResponse))
                    }
                }
                task.update { $0 = dataTask }
                dataTask.resume()
                if Task.isCancelled { dataTask.cancel() }
            }
        } onCancel: {
            task.value?.cancel()
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
                reader.start(head: continuation)
                task.resume()
            }
        } onCancel: {
            task.cancel()
        }
        reader.continuation.onTermination = { _ in
            task.cancel()
            streaming.invalidateAndCancel()
        }
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
        outgoing.timeoutInterval = max(1, Double(request.timeout.components.seconds) + Double(request.timeout.components.attoseconds) / 1e18)
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

    private static func failure(_ error: any Error) -> any Error {
        if let error = error as? URLError, error.code == .cancelled { return CancellationError() }
        return error
    }
}

/// The delegate of one streamed answer: the head resumes the caller, the body goes to a stream.
private final class StreamReader: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    let body: AsyncThrowingStream<[UInt8], any Error>
    let continuation: AsyncThrowingStream<[UInt8], any Error>.Continuation
    private let head = Locked<CheckedContinuation<HTTPURLResponse, any Error>?>(nil)

    override init() {
        (body, continuation) = AsyncThrowingStream.makeStream(of: [UInt8].self)
    }

    func start(head continuation: CheckedContinuation<HTTPURLResponse, any Error>) {
        head.update { $0 = continuation }
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        let waiting = head.update { head in defer { head = nil }; return head }
        if let response = response as? HTTPURLResponse {
            waiting?.resume(returning: response)
            completionHandler(.allow)
        } else {
            waiting?.resume(throwing: URLError(.badServerResponse))
            completionHandler(.cancel)
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        continuation.yield(Array(data))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let waiting = head.update { head in defer { head = nil }; return head }
        let failure: any Error = error.map { ($0 as? URLError)?.code == .cancelled ? CancellationError() : $0 } ?? URLError(.networkConnectionLost)
        waiting?.resume(throwing: failure)
        if let error {
            continuation.finish(throwing: (error as? URLError)?.code == .cancelled ? CancellationError() : error)
        } else {
            continuation.finish()
        }
        session.finishTasksAndInvalidate()
    }
}
