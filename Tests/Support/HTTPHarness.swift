import AsyncHTTPClient
import Foundation
package import HTTPTypes
import Hummingbird
package import HummingbirdTesting
package import Logging
package import NIOCore
import NIOHTTP1
package import SyncGateCore
package import SyncGateWire
import SyncGateWebhooks
package import SyncGateHTTP
package import SyncGateServer
package import SyncGateStorage
package import SyncGateWorker
import SyncGateConcurrency

/// The production application (``buildApplication(_:store:logger:)``) on a fresh store, for HTTP tests.
package struct HTTPHarness: Sendable {
    package static let secret = "test-secret-test-secret-test-secret-0123"

    package let store: StoreHarness
    package let authority: TokenAuthority
    package let client: any TestClientProtocol
    /// `.live`: the server's requests go through this pool instead of `client`.
    let pooled: PooledRequests?
    /// The front's live waiters (long-polls and event streams).
    package let watcher: FeedWatcher

    /// Runs `body` against the application: `.router` in memory, or `.live` on a real socket.
    /// - Parameters:
    ///   - workers: in-process worker lanes (0: a front only).
    ///   - notificationsOnly: waiting requests and idle workers never re-check the database on
    ///     their own within a test, so whatever answers before its wait ends was woken by a
    ///     notification (NOTIFY or an in-process signal), not by the polling safety net.
    package static func with<Result: Sendable>(
        _ driver: Driver,
        setup: TestingSetup = .router,
        configuration: FrontConfiguration = HTTPHarness.testConfiguration,
        collections: Collections = .default,
        workers: Int = 2,
        workerHooks: WorkerHooks = .init(),
        notificationsOnly: Bool = false,
        listenerReconnectDelay: Duration? = nil,
        front: (@Sendable (any FrontStore) -> any FrontStore)? = nil,
        server customize: @Sendable (inout ServerConfiguration) -> Void = { _ in },
        logger: Logger = StoreHarness.logger,
        _ body: @Sendable (HTTPHarness) async throws -> Result
    ) async throws -> Result {
        try await StoreHarness.with(driver, collections: collections, listenerReconnectDelay: listenerReconnectDelay) { store in
            try await run(
                store: store, setup: setup, configuration: configuration, workers: workers, workerHooks: workerHooks,
                notificationsOnly: notificationsOnly, front: front, server: customize, logger: logger, body
            )
        }
    }

    /// The polling safety net's interval when a test runs on notifications only: longer than any
    /// test, so that only a notification can wake a waiter or a worker.
    package static let noSafetyNet: Duration = .seconds(3600)

    /// Runs `body` against the application on an existing store harness.
    package static func run<Result: Sendable>(
        store: StoreHarness,
        setup: TestingSetup = .router,
        configuration: FrontConfiguration = HTTPHarness.testConfiguration,
        workers: Int = 2,
        workerHooks: WorkerHooks = .init(),
        notificationsOnly: Bool = false,
        front: (@Sendable (any FrontStore) -> any FrontStore)? = nil,
        server customize: @Sendable (inout ServerConfiguration) -> Void = { _ in },
        logger: Logger = StoreHarness.logger,
        _ body: @Sendable (HTTPHarness) async throws -> Result
    ) async throws -> Result {
        var server = serverConfiguration(store: store, front: configuration, workers: workers)
        server.workerHooks = workerHooks
        customize(&server)
        if notificationsOnly {
            server.front.pollInterval = noSafetyNet
            server.worker.pollInterval = noSafetyNet
        }
        let built = Locked<FeedWatcher?>(nil)
        let app = try await buildApplication(server, store: store.store, front: front, watcher: { watcher in built.update { $0 = watcher } }, logger: logger)
        guard let watcher = built.value else { throw TestEnvironmentError(description: "buildApplication built no feed watcher") }
        let authority = await TokenAuthority(secret: secret)
        return try await app.test(setup) { client in
            try await body(HTTPHarness(store: store, authority: authority, client: client, pooled: client.port.map(PooledRequests.init), watcher: watcher))
        }
    }

    /// The server configuration the tests run: the store's database, the test secret, short intervals.
    package static func serverConfiguration(store: StoreHarness, front: FrontConfiguration, workers: Int) -> ServerConfiguration {
        var configuration = ServerConfiguration()
        configuration.database = store.url
        configuration.jwtSecret = secret
        configuration.front = front
        configuration.collections = store.collections
        configuration.workers = workers
        configuration.worker = StoreHarness.workerConfiguration(concurrency: workers)
        // Webhook tests run their own sender, configured for the test.
        configuration.webhooks.enabled = false
        return configuration
    }

    /// Jobs get the test workers' budget of attempts (StoreHarness.workerConfiguration): a job
    /// keeps the one its front gave it.
    package static let testConfiguration = FrontConfiguration(maximumAttempts: 3, pollInterval: .milliseconds(200))

    /// Waits until `count` more requests or streams than `baseline` wait: the signal that a
    /// long-poll or event stream is asleep, or a push waits for its job, instead of a sleep.
    package func waitForWaiters(_ count: Int, beyond baseline: Int, timeout: Duration = hangGuard) async throws {
        try await eventually("\(count) waiting request(s)", timeout: timeout, every: .milliseconds(5)) {
            waiters >= baseline + count
        }
    }

    /// Waiting requests now: armed live waiters (asleep until something to read), plus
    /// subscribers of the store's notifier (waiting pushes, worker lanes, the watcher itself).
    package var waiters: Int { watcher.armedCount + store.store.notifier.subscriberCount }

    package func token(_ user: String = "alice", ttl: Int = 3600) async throws -> String {
        try await authority.issue(userID: user, ttlSeconds: ttl)
    }

    package func headers(_ user: String = "alice", device: String? = "d1") async throws -> HTTPFields {
        var fields: HTTPFields = [.authorization: "Bearer \(try await token(user))", .contentType: "application/json"]
        if let device { fields[HTTPField.Name("X-Device-Id")!] = device }
        return fields
    }

    /// A request; the body is parsed as JSON when it is JSON.
    package func send(_ method: HTTPRequest.Method, _ uri: String, headers: HTTPFields, body: String? = nil) async throws -> (status: Int, json: JSONValue?, headers: HTTPFields) {
        if let pooled {
            let response = try await pooled.send(method, uri, headers: headers, body: body)
            return (response.status, try? JSONParser().parse(Array(response.body.readableBytesView)), response.headers)
        }
        let response = try await client.executeRequest(uri: uri, method: method, headers: headers, body: body.map { ByteBuffer(string: $0) })
        let json = try? JSONParser().parse(Array(response.body.readableBytesView))
        return (Int(response.status.code), json, response.headers)
    }

    package func push(_ operations: [SyncOperation], user: String = "alice", device: String = "d1", wait: Int? = nil) async throws -> (status: Int, json: JSONValue?, headers: HTTPFields) {
        let body = JSONValue.object(["operations": .array(operations.map(\.json))]).serialized()
        let query = wait.map { "?wait=\($0)" } ?? ""
        return try await send(.post, "/v1/sync/push\(query)", headers: try await headers(user, device: device), body: body)
    }

    package func pull(user: String = "alice", device: String = "d1", query: String = "") async throws -> (status: Int, json: JSONValue?, headers: HTTPFields) {
        try await send(.get, "/v1/sync/pull\(query.isEmpty ? "" : "?" + query)", headers: try await headers(user, device: device))
    }

    /// Pushes and waits for the results (fails the test if the job does not finish).
    package func results(_ operations: [SyncOperation], user: String = "alice", device: String = "d1") async throws -> [JSONValue] {
        let response = try await push(operations, user: user, device: device, wait: 30_000)
        guard response.status == 200, let results = response.json?["results"]?.arrayValue else {
            throw TestEnvironmentError(description: "push answered \(response.status): \(String(describing: response.json))")
        }
        return results
    }

    /// The current change of each entity a user can pull, keyed `type/id`.
    package func state(user: String = "alice") async throws -> [String: JSONValue] {
        var latest: [String: JSONValue] = [:]
        for change in try await pullAll(user: user, device: "state-reader").changes {
            let key = "\(change["entity_type"]?.stringValue ?? "")/\(change["entity_id"]?.stringValue ?? "")"
            latest[key] = change
        }
        return latest
    }

    /// Pulls until has_more is false; returns the changes and the last cursor.
    package func pullAll(user: String = "alice", device: String = "d1", cursor: String? = nil) async throws -> (changes: [JSONValue], cursor: String, last: JSONValue) {
        var cursor = cursor
        var changes: [JSONValue] = []
        while true {
            let query = cursor.map { "cursor=\($0)" } ?? ""
            let response = try await pull(user: user, device: device, query: query)
            guard response.status == 200, let json = response.json else {
                throw TestEnvironmentError(description: "pull answered \(response.status): \(String(describing: response.json))")
            }
            changes += json["changes"]?.arrayValue ?? []
            cursor = json["cursor"]?.stringValue
            if json["has_more"] != .bool(true) { return (changes, cursor ?? "", json) }
        }
    }
}

extension JSONValue {
    /// `error.code` of a protocol error body.
    package var errorCode: String? { self["error"]?["code"]?.stringValue }

    package subscript(index: Int) -> JSONValue? {
        guard let array = arrayValue, array.indices.contains(index) else { return nil }
        return array[index]
    }
}

/// Requests to a `.live` server through AsyncHTTPClient's connection pool, each bounded by the
/// hang guard. HummingbirdTesting's live client holds one connection for the whole test and gives
/// a request 20 s: once the server closed that connection (its idle timeout, outlived by a long run
/// on a loaded machine; a 413) every later request failed with "I/O on closed channel".
package struct PooledRequests: Sendable {
    let port: Int

    package init(port: Int) {
        self.port = port
    }

    package func send(_ method: HTTPRequest.Method, _ uri: String, headers: HTTPFields, body: String?) async throws -> (status: Int, body: ByteBuffer, headers: HTTPFields) {
        do {
            return try await sendOnce(method, uri, headers: headers, body: body)
        } catch let error as IOError where error.errnoCode == ECONNRESET && method == .get {
            // A pooled keep-alive connection the server closed meanwhile is reset when reused
            // (seen once in a long convergence run under load); a GET is safe to send again.
            return try await sendOnce(method, uri, headers: headers, body: body)
        }
    }

    private func sendOnce(_ method: HTTPRequest.Method, _ uri: String, headers: HTTPFields, body: String?) async throws -> (status: Int, body: ByteBuffer, headers: HTTPFields) {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(uri)")
        request.method = HTTPMethod(rawValue: method.rawValue)
        for field in headers { request.headers.add(name: field.name.rawName, value: field.value) }
        if let body { request.body = .bytes(ByteBuffer(string: body)) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(hangGuard.components.seconds))
        let collected = try await response.body.collect(upTo: 256 << 20)
        var fields = HTTPFields()
        for header in response.headers {
            if let name = HTTPField.Name(header.name) { fields.append(HTTPField(name: name, value: header.value)) }
        }
        return (Int(response.status.code), collected, fields)
    }
}
