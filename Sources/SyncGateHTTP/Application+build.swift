package import Hummingbird
import HummingbirdAuth
import NIOCore
package import Prometheus
package import SyncGateStorage
package import Tracing

/// Builds the router of the HTTP front: the public health routes, every `/v1` route behind one
/// ``BearerAuthenticator`` (a new route there cannot forget authentication), and the routes of
/// `plugins` (the seed apps' dialects, when configured) behind the same one. Long-polls and event
/// streams wait on `watcher`, which the caller runs as a service. `GET /metrics` renders
/// `metrics` (the registry the process's swift-metrics backend writes to), unless the
/// configuration gives the metrics a port of their own. `GET /openapi.yaml` lists exactly the
/// routes served.
package func buildRouter(
    store: any FrontStore,
    watcher: FeedWatcher,
    authority: TokenAuthority,
    configuration: FrontConfiguration,
    plugins: [any FrontPlugin] = [],
    webhooks: (any WebhookAdministration)? = nil,
    tracer: any Tracer = InstrumentationSystem.tracer,
    metrics: PrometheusCollectorRegistry = PrometheusMetricsFactory.defaultRegistry
) throws -> Router<SyncRequestContext> {
    let router = Router(context: SyncRequestContext.self)
    let routes = RouteMethods()
    router.add(
        middleware: FrontMiddleware(
            observation: RequestObservation(tracer: tracer),
            errors: ProtocolErrorMiddleware(retryAfterSeconds: configuration.retryAfterSeconds, routes: routes),
            compression: ResponseCompression(minimumBytes: 1024)
        )
    )

    let live = LiveUpdates(store: store, watcher: watcher, pollInterval: configuration.pollInterval, retryAfterSeconds: configuration.retryAfterSeconds)
    let sync = SyncRoutes(store: store, configuration: configuration, live: live, tracer: tracer)
    let events = EventRoutes(store: store, watcher: watcher, configuration: configuration)
    let health = HealthRoutes(store: store, retryAfterSeconds: configuration.retryAfterSeconds)

    router.get("/healthz", use: health.health)
    router.get("/readyz", use: health.ready)
    if configuration.servesMetrics {
        router.get("/metrics") { _, _ in Response.prometheus(metrics) }
    }
    let authenticator = BearerAuthenticator(authority: authority)
    let authenticated = router.group("v1").add(middleware: authenticator)
    authenticated.post("sync/push", use: sync.push)
    authenticated.get("jobs/:id", use: sync.jobStatus)
    authenticated.get("sync/pull", use: sync.pull)
    authenticated.get("sync/events", use: events.events)
    PushRoutes(sync: sync).add(to: authenticated)

    // The service API: a backend's key or service token, never a user's token (see ServiceRoutes).
    let services = ServiceRoutes(sync: sync)
    let verifier = ServiceKeyVerifier(store: store, cacheTime: configuration.serviceKeyCacheTime)
    let service = router.group("v1/service").add(middleware: ServiceKeyAuthenticator(verifier: verifier, authority: authority))
    service.post("push", use: services.push)
    service.get("jobs/:id", use: services.jobStatus)
    service.get("pull", use: services.pull)
    service.get("entity", use: services.entity)
    service.get("data", use: services.data)
    if let webhooks { WebhookRoutes(administration: webhooks, readBody: sync.readBody).add(to: service) }

    let front = FrontRoutes(sync: sync, authenticator: authenticator)
    for plugin in plugins { plugin.addRoutes(to: router, front: front) }
    // The document lists the plug-ins' routes this router serves.
    var document = OpenAPIDocument.base
    if !plugins.isEmpty {
        let served = Set(router.routes.map { "\($0.method.rawValue) \($0.path.description)" })
        let merged = try OpenAPIDocument.merged(base: String(decoding: document, as: UTF8.self), parts: plugins.map(\.openAPI), served: served)
        document = Array(merged.utf8)
    }
    router.get("/openapi.yaml") { [document] _, _ in Response.openAPI(document) }
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
    /// The OpenAPI document of every route (``OpenAPIDocument``), unauthenticated.
    static func openAPI(_ document: [UInt8]) -> Response {
        Response(
            status: .ok,
            headers: [.contentType: "application/yaml; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: document))
        )
    }
}
