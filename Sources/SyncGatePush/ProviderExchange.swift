package import AsyncHTTPClient
package import NIOSSL
import NIOCore
import SyncGateConcurrency
import NIOHTTP1

/// One request to a provider and its answer, bounded in time and in what is read.
struct ProviderAnswer: Sendable {
    var status: Int
    var body: [UInt8]
    var retryAfter: String?
}

/// The HTTP client nudgers share: HTTP/2 where the provider offers it (APNs requires it), no
/// redirects, timeouts within an attempt's.
package enum PushHTTPClient {
    package static func make(timeout: Duration, tls: TLSConfiguration? = nil) -> HTTPClient {
        var settings = HTTPClient.Configuration(tlsConfiguration: tls, redirectConfiguration: .disallow)
        settings.httpVersion = .automatic
        let milliseconds = timeout.wholeMilliseconds
        settings.timeout = .init(connect: .milliseconds(min(milliseconds, 5000)), read: .milliseconds(milliseconds))
        settings.connectionPool.idleTimeout = .seconds(60)
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: settings)
    }
}

extension HTTPClient {
    /// Sends `request`; reads at most `limit` bytes of the answer (providers answer a few hundred).
    /// The answer's body is read until `timeout` from the start at the latest: AsyncHTTPClient's
    /// deadline ends with the answer's head, and an answer trickling in a byte at a time never
    /// reaches its read timeout. (A nudge's lease is twice the timeout and five seconds more.)
    func exchange(_ request: HTTPClientRequest, timeout: Duration, limit: Int = 16 * 1024) async throws -> ProviderAnswer {
        let seconds = max(1, timeout.components.seconds + (timeout.components.attoseconds > 0 ? 1 : 0))
        let deadline = ContinuousClock.now + .seconds(seconds)
        let response = try await execute(request, timeout: .seconds(seconds))
        var body: [UInt8] = []
        for try await chunk in response.body {
            body += chunk.readableBytesView.prefix(limit - body.count)
            if body.count >= limit { break }
            if ContinuousClock.now > deadline { throw HTTPClientError.deadlineExceeded }
        }
        return ProviderAnswer(status: Int(response.status.code), body: body, retryAfter: response.headers.first(name: "retry-after"))
    }
}
