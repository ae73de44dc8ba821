import SyncGateWire
public import AsyncHTTPClient
import NIOCore
import NIOHTTP1

/// ``SyncTransport`` on AsyncHTTPClient (Linux and Apple platforms).
public struct HTTPClientTransport: SyncTransport {
    /// The server, e.g. `http://127.0.0.1:8080` (no trailing slash needed).
    public let baseURL: String
    /// The HTTP client; by default the process-wide shared one.
    public let client: HTTPClient
    /// The largest body accepted, in bytes (a pull page of 1,000 large documents fits).
    public var maximumBodyBytes: Int

    /// A transport to `baseURL`.
    public init(baseURL: String, client: HTTPClient = .shared, maximumBodyBytes: Int = 256 * 1024 * 1024) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.client = client
        self.maximumBodyBytes = maximumBodyBytes
    }

    /// Sends the request and collects the whole answer (up to ``maximumBodyBytes``).
    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        let response = try await client.execute(makeRequest(request), timeout: TimeAmount(request.timeout))
        let body = try await response.body.collect(upTo: maximumBodyBytes)
        return TransportResponse(status: Int(response.status.code), headers: Self.headers(response.headers), body: Array(body.readableBytesView))
    }

    /// Sends the request and streams the answer's body until the server ends it or the
    /// reading task is cancelled.
    public func stream(_ request: TransportRequest) async throws -> TransportStream {
        // The deadline covers the whole exchange in AsyncHTTPClient, so a stream gets none: it
        // ends when the server ends it or the reading task is cancelled.
        let response = try await client.execute(makeRequest(request), deadline: .distantFuture)
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: [UInt8].self)
        let reader = Task {
            do {
                for try await buffer in response.body {
                    continuation.yield(Array(buffer.readableBytesView))
                }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in reader.cancel() }
        return TransportStream(status: Int(response.status.code), headers: Self.headers(response.headers), body: stream)
    }

    private func makeRequest(_ request: TransportRequest) -> HTTPClientRequest {
        var outgoing = HTTPClientRequest(url: baseURL + request.path)
        outgoing.method = HTTPMethod(rawValue: request.method)
        for (name, value) in request.headers {
            outgoing.headers.add(name: name, value: value)
        }
        if let body = request.body {
            outgoing.body = .bytes(ByteBuffer(bytes: body))
        }
        return outgoing
    }

    private static func headers(_ headers: HTTPHeaders) -> [String: String] {
        var fields: [String: String] = [:]
        for (name, value) in headers {
            fields[name.lowercased()] = value
        }
        return fields
    }
}
