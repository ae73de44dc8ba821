package import AsyncHTTPClient
import Foundation
import Crypto
import NIOCore
import SyncGateConcurrency
import NIOHTTP1
import Synchronization
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

    /// Sends when private receivers are allowed (nothing is checked, nothing pinned).
    let client: HTTPClient
    /// Send otherwise: each connects to the address the attempt's check passed.
    package let pinned: PinnedClients
    let configuration: WebhookConfiguration
    /// A host's addresses, for the SSRF check (tests stand in a slow one).
    let resolve: @Sendable (String) async throws -> [[UInt8]]
    /// Which addresses are refused (tests stand in a narrower rule to reach a local receiver).
    let isInternal: @Sendable ([UInt8]) -> Bool

    package init(
        client: HTTPClient, configuration: WebhookConfiguration,
        resolve: @escaping @Sendable (String) async throws -> [[UInt8]] = HostResolver.addresses(of:),
        isInternal: @escaping @Sendable ([UInt8]) -> Bool = WebhookAddressPolicy.isInternal
    ) {
        self.client = client
        self.pinned = PinnedClients(configuration: Self.clientConfiguration(configuration), retireAfter: configuration.timeout + .seconds(1))
        self.configuration = configuration
        self.resolve = resolve
        self.isInternal = isInternal
    }

    /// The client a sender needs: no redirects (a receiver must not send the server elsewhere),
    /// connect and read timeouts within the attempt's.
    package static func makeClient(_ configuration: WebhookConfiguration) -> HTTPClient {
        HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration(configuration))
    }

    static func clientConfiguration(_ configuration: WebhookConfiguration) -> HTTPClient.Configuration {
        var settings = HTTPClient.Configuration(redirectConfiguration: .disallow)
        let milliseconds = configuration.timeout.wholeMilliseconds
        settings.timeout = .init(connect: .milliseconds(min(milliseconds, 5000)), read: .milliseconds(milliseconds))
        settings.connectionPool.idleTimeout = .seconds(30)
        return settings
    }

    /// Shuts down the clients it made (not `client`, which its maker owns).
    package func shutdown() async {
        await pinned.shutdown()
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
        let started = ContinuousClock.now
        var client = self.client
        if !configuration.allowPrivateAddresses {
            // The host's look-up counts in the attempt's time, and one that does not answer is
            // left behind, not waited for (getaddrinfo cannot be cancelled): an attempt must not
            // outlive its lease, or another sender would send the message again.
            let host = target.host
            let checked: Swift.Result<[UInt8], Refused>
            do {
                checked = try await Self.unlessLate(configuration.timeout) { [resolve, isInternal] in
                    await Self.check(host: host, resolve: resolve, isInternal: isInternal)
                }
            } catch {
                return .failed("the receiver's host was not looked up within \(configuration.timeout)")
            }
            // The override is keyed by the host as the client reads the URL.
            guard let connected = Self.clientHost(of: subscription.url), connected.lowercased() == host.lowercased() else {
                return .unsendable("the receiver URL's host reads differently to the HTTP client")
            }
            switch checked {
            case .failure(let refused): return .failed(refused.description)
            // Connect to the address checked, not to what another look-up says.
            case .success(let address): client = pinned.client(host: connected, address: Self.text(of: address))
            }
        }
        do {
            return try await Self.within(configuration.timeout - started.duration(to: .now)) { [client] in
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
    /// internal; `nil` when it may. Checked when a subscription is made.
    static func refusal(ofHost host: String, resolve: @Sendable (String) async throws -> [[UInt8]] = HostResolver.addresses(of:)) async -> String? {
        if case .failure(let refused) = await check(host: host, resolve: resolve, isInternal: WebhookAddressPolicy.isInternal) { return refused.description }
        return nil
    }

    struct Refused: Error, CustomStringConvertible {
        var description: String
    }

    /// The address to connect `host` to (its first IPv4 address, else its first: many hosts and
    /// containers have no IPv6 route), or why it may not receive: it does not resolve, or one of
    /// its addresses is internal. Checked at every attempt.
    static func check(
        host: String, resolve: @Sendable (String) async throws -> [[UInt8]], isInternal: @Sendable ([UInt8]) -> Bool
    ) async -> Swift.Result<[UInt8], Refused> {
        let addresses: [[UInt8]]
        do {
            addresses = try await resolve(host)
        } catch {
            return .failure(Refused(description: "\(WebhookAddressPolicy.Refusal.unresolvable(host)): \(error)"))
        }
        guard let first = addresses.first else { return .failure(Refused(description: WebhookAddressPolicy.Refusal.unresolvable(host).description)) }
        if let inside = addresses.first(where: isInternal) {
            return .failure(Refused(description: WebhookAddressPolicy.Refusal.privateAddress(text(of: inside)).description))
        }
        return .success(addresses.first { $0.count == 4 } ?? first)
    }

    struct TimedOut: Error, CustomStringConvertible {
        var description: String
    }

    /// `body`'s value, or ``TimedOut`` once `limit` passes. Unlike ``within(_:_:)`` it does not wait
    /// for a `body` that ignores cancellation: that one is cancelled and left to end on its own.
    static func unlessLate<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        let race = FirstResult<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                race.start(continuation)
                let work = Task {
                    do { race.finish(.success(try await body())) } catch { race.finish(.failure(error)) }
                }
                let timer = Task {
                    try? await Task.sleep(for: limit)
                    race.finish(.failure(Task.isCancelled ? CancellationError() : TimedOut(description: "no answer within \(limit)")))
                }
                race.add([work, timer])
            }
        } onCancel: {
            race.finish(.failure(CancellationError()))
        }
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

    /// The host AsyncHTTPClient connects to for `url` (Foundation's reading, brackets trimmed).
    static func clientHost(of url: String) -> String? {
        guard var host = URL(string: url)?.host else { return nil }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host
    }

    static func text(of address: [UInt8]) -> String {
        if address.count == 4 { return address.map(String.init).joined(separator: ".") }
        return stride(from: 0, to: address.count, by: 2).map { String(UInt16(address[$0]) << 8 | UInt16(address[$0 + 1]), radix: 16) }.joined(separator: ":")
    }
}

/// The first of several results resumes the waiter; the tasks that race for it are cancelled then.
private final class FirstResult<T: Sendable>: Sendable {
    private let state = Mutex<(continuation: CheckedContinuation<T, any Error>?, done: Bool, tasks: [Task<Void, Never>])>((nil, false, []))

    func start(_ continuation: CheckedContinuation<T, any Error>) {
        let early = state.withLock { state -> Bool in
            if state.done { return true }
            state.continuation = continuation
            return false
        }
        // Cancelled before it began.
        if early { continuation.resume(throwing: CancellationError()) }
    }

    func add(_ tasks: [Task<Void, Never>]) {
        let done = state.withLock { state -> Bool in
            state.tasks += tasks
            return state.done
        }
        if done { tasks.forEach { $0.cancel() } }
    }

    func finish(_ result: Swift.Result<T, any Error>) {
        let taken = state.withLock { state -> (CheckedContinuation<T, any Error>?, [Task<Void, Never>])? in
            if state.done { return nil }
            state.done = true
            defer { state.continuation = nil }
            return (state.continuation, state.tasks)
        }
        guard let (continuation, tasks) = taken else { return }
        continuation?.resume(with: result)
        tasks.forEach { $0.cancel() }
    }
}
