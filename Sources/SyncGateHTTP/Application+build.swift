public import Hummingbird
import HummingbirdAuth
public import SyncGateStorage

/// Builds the router of the HTTP front: the public health routes, and every `/v1` route behind
/// one ``BearerAuthenticator`` (a new route there cannot forget authentication). Long-polls and
/// event streams wait on `watcher`, which the caller runs as a service.
public func buildRouter(
    store: any FrontStore,
    watcher: FeedWatcher,
    authority: TokenAuthority,
    configuration: FrontConfiguration
) -> Router<SyncRequestContext> {
    let router = Router(context: SyncRequestContext.self)
    // First, so it also covers unknown routes and the authenticator.
    router.add(middleware: ProtocolErrorMiddleware(retryAfterSeconds: configuration.retryAfterSeconds))

    let live = LiveUpdates(store: store, watcher: watcher, pollInterval: configuration.pollInterval, retryAfterSeconds: configuration.retryAfterSeconds)
    let sync = SyncRoutes(store: store, configuration: configuration, live: live)
    let events = EventRoutes(store: store, watcher: watcher, configuration: configuration)
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
