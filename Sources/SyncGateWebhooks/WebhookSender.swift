package import AsyncHTTPClient
import Crypto
import NIOCore
import SyncGateConcurrency
import NIOHTTP1
package import SyncGateStorage

/// One attempt of one delivery: the SSRF check, the signed POST, the answer read within bounds.
/// It decides nothing about retries (``WebhookRetryPolicy`` does) and touches no database.
package struct WebhookSender: Sendable {
    package enum Result: Sendable, Hashable {
        case delivered(status: Int)
        case failed(String)
        /// Cannot succeed however often it is tried (a malformed secret or URL): pause at once.
        case unsendable(String)
    }

    let client: HTTPClient
    let configuration: WebhookConfiguration
    /// A host's addresses, for the SSRF check (tests stand in a slow one).
    let resolve: @Sendable (String) async throws -> [[UInt8]]

    package init(
        client: HTTPClient, configuration: WebhookConfiguration,
        resolve: @escaping @Sendable (String) async throws -> [[UInt8]] = HostResolver.addresses(of:)
    ) {
        self.client = client
        self.configuration = configuration
        self.resolve = resolve
    }

    /// The client a sender needs: no redirects (a receiver must not send the server elsewhere),
    /// connect and read timeouts within the attempt's.
    package static func makeClient(_ configuration: WebhookConfiguration) -> HTTPClient {
        var settings = HTTPClient.Configuration(redirectConfiguration: .disallow)
        let milliseconds = configuration.timeout.wholeMilliseconds
        settings.timeout = .init(connect: .milliseconds(min(milliseconds, 5000)), read: .milliseconds(milliseconds))
        settings.connectionPool.idleTimeout = .seconds(30)
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: settings)
    }

    package func attempt(_ delivery: WebhookDelivery, body: String, timestamp: Int64) async -> Result {
        let subscription = delivery.subscription
        guard let key = WebhookSignature.key(of: subscription.secret) else {
            return .unsendable("the subscription's secret is not whsec_ and base64 of 24 to 64 bytes")
        }
        let target: (secure: Bool, host: String, port: Int)
        switch WebhookAddressPolicy.parse(subscription.url) {
        case .failure(let refusal): return .unsendable(refusal.description)
        case .success(let parsed): target = parsed
        }
        let body = Array(body.utf8)
        var request = HTTPClientRequest(url: subscription.url)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "user-agent", value: "SyncGate-Webhooks")
        request.headers.add(name: "webhook-id", value: delivery.messageID)
        request.headers.add(name: "webhook-timestamp", value: "\(timestamp)")
        request.headers.add(name: "webhook-signature", value: WebhookSignature.sign(id: delivery.messageID, timestamp: timestamp, body: body, key: key))
        request.body = .bytes(ByteBuffer(bytes: body))
        let prepared = request
        let limit = configuration.maximumResponseBytes
        let checked = !configuration.allowPrivateAddresses
        do {
            // The host's look-up is inside the attempt's time: a resolver that does not answer
            // must not hold an attempt past its lease (another sender would send it again).
            return try await Self.within(configuration.timeout) { [client, resolve] in
                if checked, let refusal = await Self.refusal(ofHost: target.host, resolve: resolve) {
                    return .failed(refusal)
                }
                let response = try await client.execute(prepared, timeout: .seconds(Int64(configuration.timeout.components.seconds) + 1))
                // Read at most `limit` of the answer; what is beyond it is dropped with the connection.
                var read = 0
                for try await chunk in response.body {
                    read += chunk.readableBytes
                    if read > limit { break }
                }
                let status = Int(response.status.code)
                return WebhookRetryPolicy.delivered(status: status) ? .delivered(status: status) : .failed("the receiver answered \(status)")
            }
        } catch {
            return .failed("\(error)")
        }
    }

    /// Why `host` may not receive (SSRF): it does not resolve, or one of its addresses is
    /// internal; `nil` when it may. Checked when a subscription is made and at every attempt.
    static func refusal(ofHost host: String, resolve: @Sendable (String) async throws -> [[UInt8]] = HostResolver.addresses(of:)) async -> String? {
        let addresses: [[UInt8]]
        do {
            addresses = try await resolve(host)
        } catch {
            return "\(WebhookAddressPolicy.Refusal.unresolvable(host)): \(error)"
        }
        if addresses.isEmpty { return WebhookAddressPolicy.Refusal.unresolvable(host).description }
        return addresses.first(where: WebhookAddressPolicy.isInternal).map { WebhookAddressPolicy.Refusal.privateAddress(text(of: $0)).description }
    }

    struct TimedOut: Error, CustomStringConvertible {
        var description: String
    }

    /// `body`, or an error once `limit` passes (the attempt is cancelled).
    static func within<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: limit)
                return nil
            }
            defer { group.cancelAll() }
            guard let result = try await group.next() ?? nil else { throw TimedOut(description: "no answer within \(limit)") }
            return result
        }
    }

    static func text(of address: [UInt8]) -> String {
        if address.count == 4 { return address.map(String.init).joined(separator: ".") }
        return stride(from: 0, to: address.count, by: 2).map { String(UInt16(address[$0]) << 8 | UInt16(address[$0 + 1]), radix: 16) }.joined(separator: ":")
    }
}
