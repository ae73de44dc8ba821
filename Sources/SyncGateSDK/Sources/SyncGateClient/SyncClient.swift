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
    let statusCenter: StatusCenter
    let tokens: TokenCache
    /// Whether the client is closed, and the live sync task: one lock, so that a client closing
    /// and ``startLive()`` never both win.
    private let lifecycle = Locked<(closed: Bool, live: Task<Void, Never>?)>((false, nil))

    /// Opens the device's database (creating it if needed).
    ///
    /// - Parameters:
    ///   - configuration: the server, the database file, the token provider and the rest.
    ///   - transport: how requests reach the server; by default ``URLSessionTransport`` to
    ///     ``Configuration/serverURL``.
    public init(_ configuration: Configuration, transport: (any SyncTransport)? = nil) throws {
        self.configuration = configuration
        do {
            store = try LocalStore(path: configuration.databasePath)
            deviceID = try store.deviceID(preferring: configuration.deviceID)
            try store.declare(indexes: configuration.indexes)
            statusCenter = StatusCenter(try store.openingStatus())
        } catch let error as SyncGateClientError {
            throw error
        } catch {
            throw SyncGateClientError(.localStore, "cannot open \(configuration.databasePath): \(error)")
        }
        tokens = TokenCache(provider: configuration.token, refreshMargin: configuration.tokenRefreshMargin)
        let api = SyncAPI(
            transport: transport ?? URLSessionTransport(baseURL: configuration.serverURL),
            deviceID: deviceID,
            tokens: tokens,
            requestTimeout: configuration.requestTimeout,
            logger: configuration.logger,
            status: statusCenter
        )
        engine = SyncEngine(store: store, api: api, events: hub, configuration: configuration)
    }

    /// A client dropped without ``close()``: its live sync must not go on alone against the file
    /// (the task holds the engine, not the client), and its subscriptions end.
    deinit {
        lifecycle.update { $0.live?.cancel() }
        hub.finish()
        statusCenter.finish()
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
        try await sync(followUntil: nil)
    }

    private func sync(followUntil: ContinuousClock.Instant?) async throws -> SyncReport {
        try checkOpen()
        do {
            return try await engine.sync(followUntil: followUntil)
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
        lifecycle.update { state in
            guard !state.closed, state.live == nil else { return }
            let live = LiveSync(engine: engine, wakeup: wakeup)
            state.live = Task { await live.run() }
            statusCenter.update { $0.isLive = true }
        }
    }

    /// Stops live sync and waits until its cycle has ended.
    public func stopLive() async {
        await stopLive(closing: false)
    }

    /// Stops live sync; with `closing`, in the same step marks the client closed, so that no
    /// ``startLive()`` or ``sync()`` begins afterwards. Returns whether it was open.
    @discardableResult
    private func stopLive(closing: Bool) async -> Bool {
        let (wasOpen, task) = lifecycle.update { state -> (Bool, Task<Void, Never>?) in
            defer {
                state.live = nil
                if closing { state.closed = true }
            }
            return (!state.closed, state.live)
        }
        task?.cancel()
        await task?.value
        // A startLive() while this one waited has its own live sync running: leave it shown.
        lifecycle.update { state in
            if state.live == nil { statusCenter.update { $0.isLive = false } }
        }
        return wasOpen
    }

    /// Events from now on: settled writes (rejections among them), resyncs, household changes,
    /// live sync failures. Each call is a separate subscription.
    public func events() -> AsyncStream<SyncEvent> {
        hub.subscribe()
    }

    /// One sync for a background task (`BGAppRefreshTask`, `BGProcessingTask`, a nudge): what
    /// ``sync()`` does, given up at `deadline`. Writes pushed before the deadline stay pushed and
    /// are followed by the next sync; pages pulled stay applied. Jobs still running at half the
    /// time left are left to the next sync, so the pull gets the other half.
    ///
    /// ```swift
    /// BGTaskScheduler.shared.register(forTaskWithIdentifier: "com.example.sync", using: nil) { task in
    ///     let work = Task { try await client.syncOnce(deadline: .now + .seconds(25)) }
    ///     task.expirationHandler = { work.cancel() }
    ///     Task { task.setTaskCompleted(success: (try? await work.value) != nil) }
    /// }
    /// ```
    /// - Throws: ``SyncGateClientError/Code/deadlineExceeded`` when the deadline came first; what
    ///   ``sync()`` throws otherwise.
    @discardableResult
    public func syncOnce(deadline: ContinuousClock.Instant) async throws -> SyncReport {
        try checkOpen()
        return try await withThrowingTaskGroup(of: SyncReport?.self) { group in
            let followUntil = Self.followUntil(now: .now, deadline: deadline)
            group.addTask { try await self.sync(followUntil: followUntil) }
            group.addTask {
                try await Task.sleep(until: deadline, clock: .continuous)
                return nil
            }
            defer { group.cancelAll() }
            guard let report = try await group.next() ?? nil else {
                throw SyncGateClientError(.deadlineExceeded, "the sync did not finish by its deadline")
            }
            return report
        }
    }

    /// When a background sync stops following its jobs: halfway to its deadline.
    static func followUntil(now: ContinuousClock.Instant, deadline: ContinuousClock.Instant) -> ContinuousClock.Instant {
        deadline <= now ? now : now + now.duration(to: deadline) / 2
    }

    /// Stops live sync and ends event and status subscriptions. The client cannot be used afterwards.
    public func close() async {
        await stopLive(closing: true)
        // After a cycle still running ends; none starts afterwards.
        _ = try? await engine.terminate {}
        hub.finish()
        statusCenter.finish()
        store.close()
    }

    /// Signs the user out of this device: stops live sync, stops push nudges to the device (if
    /// the server can be reached; `unregisteringPush: false` skips it), erases the local
    /// database (documents, unsent writes, cursor, device id) and forgets the token. The client
    /// is closed afterwards; open a new one for the next user. Unsent writes are lost: check
    /// ``SyncStatus/pendingWrites`` (and sync) first if they matter.
    public func signOut(unregisteringPush: Bool = true) async throws {
        guard await stopLive(closing: true) else { throw SyncGateClientError(.closed, "the client was closed") }
        defer {
            hub.finish()
            statusCenter.finish()
            store.close()
        }
        if unregisteringPush {
            do {
                try await engine.api.unregisterPush()
            } catch {
                configuration.logger.debug("sign-out: could not unregister push: \(error)", metadata: ["syncgate.device": "\(deviceID)"])
            }
        }
        // From here the provider is not asked again (it may already give the next user's
        // token): a sync the app started ends with the token held, or fails as closed if it
        // needs another. Once it has ended, the token is forgotten and the data erased.
        tokens.freeze()
        try await engine.terminate {
            tokens.forget()
            try await local { try await store.erase() }
        }
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
    ///   - apnsToken: the token's bytes.
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

    /// Where sync stands now.
    public var status: SyncStatus { statusCenter.status }

    /// The status now, then each time it changes (a subscriber that reads slowly gets the newest
    /// value, not every one), until the loop stops or the client closes.
    public func statusUpdates() -> AsyncStream<SyncStatus> {
        statusCenter.subscribe()
    }

    /// Writes not yet decided by the server.
    public func pendingWriteCount() async throws -> Int {
        try checkOpen()
        return try await local { try await store.pendingCount() }
    }

    func checkOpen() throws {
        if lifecycle.value.closed { throw SyncGateClientError(.closed, "the client was closed") }
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
