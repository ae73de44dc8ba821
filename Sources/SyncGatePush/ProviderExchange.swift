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
    func exchange(_ request: HTTPClientRequest, timeout: Duration, limit: Int = 16 * 1024) async throws -> ProviderAnswer {
        let seconds = max(1, timeout.components.seconds + (timeout.components.attoseconds > 0 ? 1 : 0))
        let response = try await execute(request, timeout: .seconds(seconds))
        var body: [UInt8] = []
        for try await chunk in response.body {
            body += chunk.readableBytesView.prefix(limit - body.count)
            if body.count >= limit { break }
        }
        return ProviderAnswer(status: Int(response.status.code), body: body, retryAfter: response.headers.first(name: "retry-after"))
    }
}
