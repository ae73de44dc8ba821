package import Hummingbird

/// Routes a deployment mounts beside `/v1` by configuration, from a target of their own (the
/// seed apps' dialects, `SyncGateDialects`). The front knows a plug-in only through this.
package protocol FrontPlugin: Sendable {
    /// Adds the plug-in's routes to `router`, each behind `front.authenticator` unless public.
    func addRoutes(to router: Router<SyncRequestContext>, front: FrontRoutes)
    /// Its part of the OpenAPI document: YAML with `tags`, `paths` and `components`, merged into
    /// the front's (``OpenAPIDocument``). Only the operations the router serves are kept, so one
    /// document can describe routes a configuration leaves out.
    var openAPI: String { get }
}

/// What a plug-in's routes may use of the front: the `/v1` push pipeline (body limits, enqueue
/// and wait), the configuration, and the one bearer authenticator.
package struct FrontRoutes: Sendable {
    package let sync: SyncRoutes
    package let authenticator: BearerAuthenticator

    package var configuration: FrontConfiguration { sync.configuration }
}
