package import Hummingbird
import HummingbirdAuth
import NIOCore
package import Prometheus
package import SyncGateStorage
package import Tracing

/// Builds the router of the HTTP front: the public health routes, and every `/v1` route behind
/// one ``BearerAuthenticator`` (a new route there cannot forget authentication). Long-polls and
/// event streams wait on `watcher`, which the caller runs as a service. `GET /metrics` renders
/// `metrics` (the registry the process's swift-metrics backend writes to), unless the
/// configuration gives the metrics a port of their own.
package func buildRouter(
    store: any FrontStore,
    watcher: FeedWatcher,
    authority: TokenAuthority,
    configuration: FrontConfiguration,
    tracer: any Tracer = InstrumentationSystem.tracer,
    metrics: PrometheusCollectorRegistry = PrometheusMetricsFactory.defaultRegistry
) -> Router<SyncRequestContext> {
    let router = Router(context: SyncRequestContext.self)
    // Outermost: it sees the status the client gets, unknown routes and refusals included.
    router.add(middleware: RequestObservationMiddleware(tracer: tracer))
    // Then every failure becomes a protocol error, the authenticator's included.
    let routes = RouteMethods()
    router.add(middleware: ProtocolErrorMiddleware(retryAfterSeconds: configuration.retryAfterSeconds, routes: routes))
    // Inside it: answers, errors included, are compressed when the client accepts gzip.
    router.add(middleware: ResponseCompressionMiddleware(minimumBytes: 1024))

    let live = LiveUpdates(store: store, watcher: watcher, pollInterval: configuration.pollInterval, retryAfterSeconds: configuration.retryAfterSeconds)
    let sync = SyncRoutes(store: store, configuration: configuration, live: live, tracer: tracer)
    let events = EventRoutes(store: store, watcher: watcher, configuration: configuration)
    let health = HealthRoutes(store: store, retryAfterSeconds: configuration.retryAfterSeconds)

    router.get("/healthz", use: health.health)
    router.get("/readyz", use: health.ready)
    if configuration.servesMetrics {
        router.get("/metrics") { _, _ in Response.prometheus(metrics) }
    }
    router.get("/openapi.yaml") { _, _ in Response.openAPI }

    let authenticated = router.group("v1").add(middleware: BearerAuthenticator(authority: authority))
    authenticated.post("sync/push", use: sync.push)
    authenticated.get("jobs/:id", use: sync.jobStatus)
    authenticated.get("sync/pull", use: sync.pull)
    authenticated.get("sync/events", use: events.events)

    // The seed apps' own dialects, behind the same authenticator.
    let dialects = DialectRoutes(sync: sync)
    let legacy = router.group("sync").add(middleware: BearerAuthenticator(authority: authority))
    legacy.post("push", use: dialects.dietPush)
    legacy.get("pull", use: dialects.dietPull)
    legacy.get("full", use: dialects.full)
    legacy.post("full", use: dialects.full)
    router.group("api/sync").add(middleware: BearerAuthenticator(authority: authority)).get("changes", use: dialects.pantryChanges)
    routes.record(router.routes.map { ($0.path, $0.method) })
    return router
}

extension Response {
    /// The registry in Prometheus' text format (version 0.0.4), unauthenticated like the probes.
    package static func prometheus(_ registry: PrometheusCollectorRegistry) -> Response {
        var bytes: [UInt8] = []
        registry.emit(into: &bytes)
        return Response(
            status: .ok,
            headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8", .cacheControl: "no-store"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes))
        )
    }
}

extension Response {
    /// The OpenAPI document of every route (`Resources/openapi.yaml`), unauthenticated.
    static var openAPI: Response {
        Response(
            status: .ok,
            headers: [.contentType: "application/yaml; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: PackageResources.openapi_yaml))
        )
    }
}
