import CoreMetrics
import Foundation
import HTTPTypes
import Hummingbird
import ServiceLifecycle
import SyncGateCore
import SyncGateWire
import SyncGateRuntime
import SyncGateStorage

/// The paths of routes whose connections stay open after the route returns.
package enum StreamRoutes {
    /// ``EventRoutes``'s path, as the router registers it.
    package static let eventStream = "/v1/sync/events"
}

/// `GET /v1/sync/events`: server-sent `poke` events whenever a feed the caller reads advances,
/// and a comment line every keep-alive interval. Clients pull on a poke.
///
/// The stream is a ``FeedWatcher`` waiter armed at the heads of the caller's feeds: it costs no
/// store call until one of them advances or the caller's households change. It ends when the
/// token expires (the client reconnects with a fresh one), after the configured maximum
/// lifetime, and on graceful shutdown.
struct EventRoutes: Sendable {
    let store: any FrontStore
    let watcher: FeedWatcher
    let configuration: FrontConfiguration

    func events(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let reader = RequestReader(request: request)
        let userID = try context.userID()
        let deviceID = try reader.deviceID()
        _ = try reader.query(allowed: [])
        let user = Scope.user(userID)
        // Registered before anything is read, so no change between the reads below and the wait
        // goes unseen; refused over a connection cap before the stream starts.
        let waiter = try watcher.register(DeviceKey(userID: userID, deviceID: deviceID), feeds: [user], retryAfterSeconds: configuration.retryAfterSeconds)
        var stream = EventStream(userID: userID, waiter: waiter, store: store, watcher: watcher)
        try await stream.start()

        let keepAlive = configuration.keepAliveInterval
        var ends = ContinuousClock.now + configuration.maximumStreamLifetime
        if let expiresAt = context.identity?.expiresAt {
            ends = min(ends, ContinuousClock.now + .milliseconds(Int64(max(0, expiresAt.timeIntervalSinceNow) * 1000)))
        }
        let end = ends
        let headers: HTTPFields = [
            .contentType: "text/event-stream",
            .cacheControl: "no-cache",
            HTTPField.Name("X-Accel-Buffering")!: "no",
        ]
        return Response(status: .ok, headers: headers, body: ResponseBody { [stream] writer in
            var stream = stream
            LiveConnectionGauge.events.increment()
            defer {
                waiter.unregister()
                LiveConnectionGauge.events.decrement()
            }
            try await writer.write(ByteBuffer(string: ": connected\nretry: 3000\n\n"))
            try await withGracefulShutdownHandler {
                while let next = try await stream.next(keepAlive: keepAlive, end: end) {
                    try await writer.write(ByteBuffer(string: next))
                }
            } onGracefulShutdown: {
                waiter.close()
            }
            try await writer.finish(nil)
        })
    }
}

/// One event stream's view of the caller's feeds: the positions it has poked up to.
struct EventStream: Sendable {
    let userID: String
    let waiter: LiveWaiter
    let store: any FrontStore
    let watcher: FeedWatcher
    private(set) var positions: [Scope: Int64] = [:]
    private(set) var scopesVersion: Int64 = 0

    init(userID: String, waiter: LiveWaiter, store: any FrontStore, watcher: FeedWatcher) {
        self.userID = userID
        self.waiter = waiter
        self.store = store
        self.watcher = watcher
    }

    /// Reads the caller's feeds and their heads; the stream pokes past them.
    mutating func start() async throws {
        _ = try await refreshScopes()
    }

    /// The next text to send: a poke, a keep-alive comment, or `nil` when the stream ends.
    mutating func next(keepAlive: Duration, end: ContinuousClock.Instant) async throws -> String? {
        let now = ContinuousClock.now
        guard now < end else { return nil }
        watcher.arm(waiter, positions: positions, scopesVersion: scopesVersion)
        switch await waiter.wait(until: min(now + keepAlive, end)) {
        case .closed:
            return nil
        case .timedOut:
            return ContinuousClock.now < end ? ": keep-alive\n\n" : nil
        case .delivered(let wake):
            var poked = wake.advanced
            for (scope, head) in watcher.heads(of: wake.advanced) { positions[scope] = max(positions[scope] ?? 0, head) }
            if wake.scopesChanged || wake.resynchronize {
                poked.formUnion(try await refreshScopes())
                // A change of scopes is learned by pulling the user's feed.
                poked.insert(.user(userID))
            }
            if wake.resynchronize { poked.formUnion(positions.keys) }
            let households = poked.compactMap(\.householdID).sorted()
            let poke: JSONValue = ["household_ids": .array(households.map(JSONValue.string)), "user": .bool(poked.contains(.user(userID)))]
            return "event: poke\ndata: \(poke.serialized())\n\n"
        }
    }

    /// Re-reads the caller's scopes (version first, then households, so a change in between
    /// wakes the stream again) and watches the feeds added at their heads; returns them.
    private mutating func refreshScopes() async throws -> Set<Scope> {
        let user = Scope.user(userID)
        let version = try await store.watchState(feeds: [], users: [userID]).scopesVersions[ExactKey(userID)] ?? 0
        let scopes = Set(try await store.readableScopes(userID: userID)).union([user])
        let added = scopes.subtracting(positions.keys)
        watcher.watch(waiter, feeds: scopes)
        for scope in Set(positions.keys).subtracting(scopes) { positions[scope] = nil }
        if !added.isEmpty {
            let heads = try await store.watchState(feeds: Array(added), users: []).heads
            for scope in added { positions[scope] = heads[scope] ?? 0 }
        }
        scopesVersion = version
        return added
    }
}
