public import Hummingbird
import HummingbirdAuth
public import SyncGateStorage

/// Builds the router of the HTTP front: the public health routes, and every `/v1` route behind
/// one ``BearerAuthenticator`` (a new route there cannot forget authentication).
public func buildRouter(
    store: any FrontStore,
    authority: TokenAuthority,
    configuration: FrontConfiguration
) -> Router<SyncRequestContext> {
    let router = Router(context: SyncRequestContext.self)
    // First, so it also covers unknown routes and the authenticator.
    router.add(middleware: ProtocolErrorMiddleware(retryAfterSeconds: configuration.retryAfterSeconds))

    let live = LiveUpdates(store: store, pollInterval: configuration.pollInterval)
    let sync = SyncRoutes(store: store, configuration: configuration, live: live)
    let events = EventRoutes(store: store, configuration: configuration)
    let health = HealthRoutes(store: store, retryAfterSeconds: configuration.retryAfterSeconds)

    router.get("/healthz", use: health.health)
    router.get("/readyz", use: health.ready)

    let authenticated = router.group("v1").add(middleware: BearerAuthenticator(authority: authority))
    authenticated.post("sync/push", use: sync.push)
    authenticated.get("jobs/:id", use: sync.jobStatus)
    authenticated.get("sync/pull", use: sync.pull)
    authenticated.get("sync/events", use: events.events)
    return router
}
