import SyncGateWire
import SyncGateConcurrency
import Foundation
import Logging

/// An offline-first client of a SyncGate server: a local store the app reads and writes at
/// once, an outbox of writes that ``sync()`` pushes, and pulls that bring the other devices'
/// changes — on demand, or continuously with ``startLive()``.
///
/// ```swift
/// let client = try SyncClient(.init(serverURL: URL(string: "https://sync.example.com")!, databasePath: path) { try await auth.token() })
/// try await client.write(type: "inventory", id: "milk", data: ["name": "Milk", "quantity": 2], household: "home")
/// try await client.sync()
/// for try await items in client.observe(type: "inventory") { render(items) }
/// client.startLive()
/// ```
///
/// Reads show the server's data with this device's unconfirmed writes applied. Every write
/// gets an idempotency key once, so pushing it again after a lost answer never applies it
/// twice; the server's decision arrives as a ``SyncEvent/writeSettled(_:)`` event.
public final class SyncClient: Sendable {
    /// The device id sent as `X-Device-Id`.
    public let deviceID: String
    let configuration: Configuration
    let store: LocalStore
    let engine: SyncEngine
    let hub = EventHub()
    let wakeup = Wakeup()
    private let live = Locked<Task<Void, Never>?>(nil)
    private let closed = Locked(false)

    /// Opens the device's database (creating it if needed).
    ///
    /// - Parameter transport: how requests reach the server; by default ``URLSessionTransport`` to
    ///   ``Configuration/serverURL``.
    public init(_ configuration: Configuration, transport: (any SyncTransport)? = nil) throws {
        self.configuration = configuration
        do {
            store = try LocalStore(path: configuration.databasePath)
            deviceID = try store.deviceID(preferring: configuration.deviceID)
        } catch let error as SyncGateClientError {
            throw error
        } catch {
            throw SyncGateClientError(.localStore, "cannot open \(configuration.databasePath): \(error)")
        }
        let api = SyncAPI(
            transport: transport ?? URLSessionTransport(baseURL: configuration.serverURL),
            deviceID: deviceID,
            tokens: TokenCache(provider: configuration.token),
            requestTimeout: configuration.requestTimeout,
            logger: configuration.logger
        )
        engine = SyncEngine(store: store, api: api, events: hub, configuration: configuration)
    }

    // MARK: - Sync

    /// Pushes the outbox (following jobs the server answers 202 for), then pulls every change
    /// since the last pull, starting over if the server asks.
    ///
    /// Writes the server rejects leave the outbox and are reported; writes that failed in a way
    /// that may pass (a job that died, a job still running) stay and are pushed again next
    /// time with the same idempotency keys (``SyncReport/pending``).
    /// - Throws: ``SyncGateClientError``; ``SyncGateClientError/isRetryable`` tells whether a later try may succeed.
    @discardableResult
    public func sync() async throws -> SyncReport {
        try checkOpen()
        do {
            return try await engine.sync()
        } catch let error as SyncGateClientError {
            throw error
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw SyncGateClientError(.localStore, "\(error)")
        }
    }

    /// Keeps the device in sync until ``stopLive()``: a cycle now, then one whenever the server
    /// reports a change (server-sent events, or long-poll while the event stream is down) and
    /// whenever the app writes. Failures are retried with backoff and reported as
    /// ``SyncEvent/liveSyncFailed(_:retryIn:)``. Calling it while live does nothing.
    public func startLive() {
        guard !closed.value else { return }
        live.update { task in
            guard task == nil else { return }
            let live = LiveSync(engine: engine, wakeup: wakeup)
            task = Task { await live.run() }
        }
    }

    /// Stops live sync and waits until its cycle has ended.
    public func stopLive() async {
        let task = live.update { task -> Task<Void, Never>? in
            defer { task = nil }
            return task
        }
        task?.cancel()
        await task?.value
    }

    /// Events from now on: settled writes (rejections among them), resyncs, household changes,
    /// live sync failures. Each call is a separate subscription.
    public func events() -> AsyncStream<SyncEvent> {
        hub.subscribe()
    }

    /// Stops live sync and ends event subscriptions. The client cannot be used afterwards.
    public func close() async {
        closed.update { $0 = true }
        await stopLive()
        hub.finish()
        store.close()
    }

    // MARK: - Push nudges

    /// Registers this device's push address, so that the server wakes the app in the background
    /// with a silent `sync_nudge` push when a feed it reads advances (docs/push.md). Call it
    /// after sign-in and whenever the OS hands the app a token; a new one replaces the old.
    public func registerPushToken(_ registration: PushRegistration) async throws {
        try checkOpen()
        try await engine.api.registerPush(registration)
    }

    /// Registers an APNs device token as the OS hands it to the app
    /// (`application(_:didRegisterForRemoteNotificationsWithDeviceToken:)`).
    /// - Parameters:
    ///   - topic: the app's bundle id.
    ///   - environment: `.sandbox` for builds run from Xcode, `.production` for TestFlight and the App Store.
    public func registerPushToken(apnsToken: some Sequence<UInt8>, topic: String, environment: PushRegistration.Environment) async throws {
        let hex = apnsToken.map { byte in
            let digits = Array("0123456789abcdef".utf8)
            return String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]], as: UTF8.self)
        }.joined()
        try await registerPushToken(.apns(token: hex, topic: topic, environment: environment))
    }

    /// Stops nudges to this device (at sign-out).
    public func unregisterPushToken() async throws {
        try checkOpen()
        try await engine.api.unregisterPush()
    }

    /// Whether a push's payload is a SyncGate nudge: an APNs `userInfo`, or an FCM message's `data`.
    public static func isNudge(_ payload: [AnyHashable: Any]) -> Bool {
        payload["type"] as? String == "sync_nudge"
    }

    /// Handles a silent push: for a SyncGate nudge, runs one ``sync()`` and answers whether it
    /// brought anything from the server (for the fetch completion handler's `.newData` or
    /// `.noData`); for any other payload, does nothing and answers `false`.
    /// - Throws: what ``sync()`` throws (answer `.failed`).
    public func handleNudge(userInfo: [AnyHashable: Any]) async throws -> Bool {
        guard Self.isNudge(userInfo) else { return false }
        let report = try await sync()
        return report.pulledChanges > 0 || report.resynced != nil || !report.settled.isEmpty
    }

    // MARK: - Inspection

    /// The households the user belongs to, as of the last pull.
    public func households() async throws -> [String] {
        try checkOpen()
        return try await local { try await store.households() }
    }

    /// Writes not yet decided by the server.
    public func pendingWriteCount() async throws -> Int {
        try checkOpen()
        return try await local { try await store.pendingCount() }
    }

    func checkOpen() throws {
        if closed.value { throw SyncGateClientError(.closed, "the client was closed") }
    }

    /// Runs a local database call, its failures as ``SyncGateClientError/Code/localStore``.
    func local<Result>(_ body: () async throws -> Result) async throws -> Result {
        do {
            return try await body()
        } catch let error as SyncGateClientError {
            throw error
        } catch {
            throw SyncGateClientError(.localStore, "\(error)")
        }
    }
}
