import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import SyncGateCore
import SyncGateDialects
import SyncGateWire
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import SyncGateWebhooks
import Testing
import Yams

/// The front's routes, as the router lists them.
@Suite(.timeLimit(.minutes(10))) struct RouterTests {
    static let publicPaths = ["/healthz", "/metrics", "/openapi.yaml", "/readyz"]

    static func router(_ harness: StoreHarness, dialects: Set<Dialect> = Set(Dialect.allCases)) async throws -> Router<SyncRequestContext> {
        let watcher = FeedWatcher(store: harness.store, interval: .seconds(1), limits: .init(), logger: StoreHarness.logger)
        let plugins: [any FrontPlugin] = dialects.isEmpty ? [] : [DialectPlugin(dialects, store: try harness.dialects)]
        return try buildRouter(
            store: harness.store, watcher: watcher, authority: await TokenAuthority(secret: HTTPHarness.secret), configuration: .init(), plugins: plugins,
            webhooks: StoreWebhookAdministration(store: harness.store, allowPrivate: false)
        )
    }

    /// Every route but the probes, the metrics and the API document sits behind the
    /// authenticator, `/v1` and the dialects alike: a route added cannot forget it.
    @Test(arguments: Driver.selected)
    func everyRouteButThePublicOnesNeedsAToken(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let router = try await Self.router(harness)
            let routes = router.routes.map { (path: $0.path.description, method: $0.method) }
            let guarded = routes.filter { !Self.publicPaths.contains($0.path) }
            #expect(Set(routes.map(\.path)).intersection(Self.publicPaths).sorted() == Self.publicPaths)
            #expect(guarded.count >= 9)
            try await Application(router: router).test(.router) { client in
                for route in guarded {
                    let path = route.path.replacingOccurrences(of: ":id", with: "1")
                    let response = try await client.executeRequest(uri: path, method: route.method, headers: [HTTPField.Name("X-Device-Id")!: "d1"], body: nil)
                    #expect(response.status == .unauthorized, "\(route.method) \(route.path)")
                    let body = try? JSONParser().parse(Array(response.body.readableBytesView))
                    #expect(body?.errorCode == "UNAUTHENTICATED", "\(route.method) \(route.path)")
                }
            }
        }
    }

    /// A router's routes as `METHOD /path`, path parameters as `{}`: `/v1/jobs/:id` and
    /// `/v1/jobs/{job_id}` are one route.
    static func served<Context>(_ router: Router<Context>) -> Set<String> {
        Set(router.routes.map { "\($0.method.rawValue) \(normalized($0.path.description))" })
    }

    /// An OpenAPI document's `paths` as `METHOD /path`, as ``served(_:)`` spells them.
    static func documented(_ paths: [String: Any]) throws -> Set<String> {
        var documented: Set<String> = []
        for (path, item) in paths {
            let operations = try #require(item as? [String: Any], "\(path)")
            for method in ["get", "put", "post", "delete", "patch", "head", "options", "trace"] where operations[method] != nil {
                documented.insert("\(method.uppercased()) \(normalized(path))")
            }
        }
        return documented
    }

    static func normalized(_ path: String) -> String {
        path.split(separator: "/", omittingEmptySubsequences: false)
            .map { $0.hasPrefix(":") || $0.hasPrefix("{") ? "{}" : String($0) }.joined(separator: "/")
    }

    /// The OpenAPI document `GET /openapi.yaml` serves lists exactly the router's routes, whichever
    /// dialects are mounted: every route documented, every documented route served. Without
    /// dialects it is Resources/openapi.yaml as written.
    @Test(arguments: [[], [.dietTracker], [.pantryPal], Set(Dialect.allCases)] as [Set<Dialect>])
    func theOpenAPIDocumentListsExactlyTheRoutesServed(_ dialects: Set<Dialect>) async throws {
        try await StoreHarness.with(.sqlite) { harness in
            let router = try await Self.router(harness, dialects: dialects)
            let served = Self.served(router)
            try await Application(router: router).test(.router) { client in
                let response = try await client.executeRequest(uri: "/openapi.yaml", method: .get, headers: [:], body: nil)
                #expect(response.status == .ok)
                #expect(response.headers[.contentType]?.hasPrefix("application/yaml") == true)
                let document = try #require(try Yams.load(yaml: String(buffer: response.body)) as? [String: Any])
                #expect(document["openapi"] as? String == "3.1.0")
                let paths = try #require(document["paths"] as? [String: Any])
                let documented = try Self.documented(paths)
                #expect(served.subtracting(documented).isEmpty, "served but not documented: \(served.subtracting(documented).sorted())")
                #expect(documented.subtracting(served).isEmpty, "documented but not served: \(documented.subtracting(served).sorted())")
                #expect(served.contains("POST /sync/push") == dialects.contains(.dietTracker))
                #expect(served.contains("GET /api/sync/changes") == dialects.contains(.pantryPal))
                #expect(served.contains("GET /sync/full") == !dialects.isEmpty)
                #expect(served.count >= 8)
                // Every tag defined is used by an operation served, and every tag used is defined.
                let tags = Set((document["tags"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String })
                let used = Set(paths.values.flatMap { item in
                    (item as? [String: Any] ?? [:]).values.flatMap { (($0 as? [String: Any])?["tags"] as? [String]) ?? [] }
                })
                #expect(tags == used)
                #expect(tags.isSuperset(of: dialects.map(\.rawValue)))
                if dialects.isEmpty {
                    #expect(Array(response.body.readableBytesView) == OpenAPIDocument.base)
                }
            }
        }
    }
}
