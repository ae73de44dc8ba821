import HTTPTypes
import Hummingbird
import ServiceLifecycle
import Synchronization
import SyncGateCore
import SyncGateStorage

/// `GET /v1/sync/events`: server-sent `poke` events whenever a feed the caller reads advances,
/// and a comment line every keep-alive interval. Clients pull on a poke.
struct EventRoutes: Sendable {
    let store: any FrontStore
    let configuration: FrontConfiguration

    func events(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let reader = RequestReader(request: request)
        let userID = try context.userID()
        _ = try reader.deviceID()
        _ = try reader.query(allowed: [])
        let initialScopes = try await store.readableScopes(userID: userID)
        let store = self.store
        let keepAlive = configuration.keepAliveInterval
        let headers: HTTPFields = [
            .contentType: "text/event-stream",
            .cacheControl: "no-cache",
            HTTPField.Name("X-Accel-Buffering")!: "no",
        ]
        return Response(status: .ok, headers: headers, body: ResponseBody { writer in
            try await Self.stream(to: &writer, userID: userID, scopes: initialScopes, store: store, keepAlive: keepAlive)
        })
    }

    static func stream(to writer: inout any ResponseBodyWriter, userID: String, scopes initial: [Scope], store: any FrontStore, keepAlive: Duration) async throws {
        var scopes = Set(initial).union([.user(userID)])
        let subscription = CurrentSubscription(store.notifier.subscribe(.init(scopes: scopes)))
        try await writer.write(ByteBuffer(string: ": connected\nretry: 3000\n\n"))
        try await withGracefulShutdownHandler {
            defer { subscription.cancel() }
            while true {
                guard let events = await subscription.current.next(timeout: keepAlive) else { break }
                if events.isEmpty {
                    try await writer.write(ByteBuffer(string: ": keep-alive\n\n"))
                    continue
                }
                var advanced: Set<Scope> = []
                var resynchronize = false
                for event in events {
                    switch event {
                    case .feedAdvanced(let scope): advanced.insert(scope)
                    case .resynchronize: resynchronize = true
                    case .jobFinished, .jobsAvailable: break
                    }
                }
                // A poke on the user's own feed may mean a household was joined or left.
                if advanced.contains(.user(userID)) || resynchronize {
                    let current = Set(try await store.readableScopes(userID: userID)).union([.user(userID)])
                    if current != scopes {
                        advanced.formUnion(current.subtracting(scopes))
                        scopes = current
                        subscription.replace(with: store.notifier.subscribe(.init(scopes: scopes)))
                    }
                }
                if resynchronize { advanced.formUnion(scopes) }
                let households = advanced.compactMap(\.householdID).sorted()
                let poke: JSONValue = ["household_ids": .array(households.map(JSONValue.string)), "user": .bool(advanced.contains(.user(userID)))]
                try await writer.write(ByteBuffer(string: "event: poke\ndata: \(poke.serialized())\n\n"))
            }
        } onGracefulShutdown: {
            subscription.cancel()
        }
        try await writer.finish(nil)
    }
}

/// The stream's subscription, replaceable when the user's households change and cancellable
/// from the shutdown handler.
final class CurrentSubscription: Sendable {
    private let state: Mutex<(subscription: ChangeSubscription, cancelled: Bool)>

    init(_ subscription: ChangeSubscription) {
        state = Mutex((subscription, false))
    }

    var current: ChangeSubscription { state.withLock { $0.subscription } }

    func replace(with subscription: ChangeSubscription) {
        let old = state.withLock { state -> ChangeSubscription in
            defer { state.subscription = subscription }
            return state.subscription
        }
        old.cancel()
        if state.withLock({ $0.cancelled }) { subscription.cancel() }
    }

    func cancel() {
        let subscription = state.withLock { state -> ChangeSubscription in
            state.cancelled = true
            return state.subscription
        }
        subscription.cancel()
    }
}
