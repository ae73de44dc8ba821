public import Hummingbird

public import SyncGateStorage

/// Builds the router every `serve` process and every HTTP test uses.
public func buildRouter(
    store: any SyncStore,
    authority: TokenAuthority,
    configuration: FrontConfiguration
) -> Router<BasicRequestContext> {
    let router = Router()
    // First, so it also covers unknown routes.
    router.add(middleware: ProtocolErrorMiddleware(retryAfterSeconds: configuration.retryAfterSeconds))

    let live = LiveUpdates(store: store, pollInterval: configuration.pollInterval)
    let sync = SyncRoutes(store: store, authority: authority, configuration: configuration, live: live)
    let events = EventRoutes(store: store, authority: authority, configuration: configuration)
    let health = HealthRoutes(store: store, retryAfterSeconds: configuration.retryAfterSeconds)

    router.get("/healthz", use: health.health)
    router.get("/readyz", use: health.ready)
    router.post("/v1/sync/push", use: sync.push)
    router.get("/v1/jobs/:id", use: sync.jobStatus)
    router.get("/v1/sync/pull", use: sync.pull)
    router.get("/v1/sync/events", use: events.events)
    return router
}
