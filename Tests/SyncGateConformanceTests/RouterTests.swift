import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import Testing
import Yams

/// The front's routes, as the router lists them.
@Suite(.timeLimit(.minutes(10))) struct RouterTests {
    static let publicPaths = ["/healthz", "/metrics", "/openapi.yaml", "/readyz"]

    static func router(_ harness: StoreHarness) async -> Router<SyncRequestContext> {
        let watcher = FeedWatcher(store: harness.store, interval: .seconds(1), limits: .init(), logger: StoreHarness.logger)
        return buildRouter(store: harness.store, watcher: watcher, authority: await TokenAuthority(secret: HTTPHarness.secret), configuration: .init())
    }

    /// Every route but the probes, the metrics and the API document sits behind the
    /// authenticator, `/v1` and the dialects alike: a route added cannot forget it.
    @Test(arguments: Driver.selected)
    func everyRouteButThePublicOnesNeedsAToken(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let router = await Self.router(harness)
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

    /// The OpenAPI document (Resources/openapi.yaml) lists exactly the router's routes: every
    /// route documented, every documented route served; `GET /openapi.yaml` serves it.
    @Test func theOpenAPIDocumentListsExactlyTheRoutesServed() async throws {
        try await StoreHarness.with(.sqlite) { harness in
            let router = await Self.router(harness)
            // `/v1/jobs/:id` and `/v1/jobs/{job_id}` are one route.
            @Sendable func normalized(_ path: String) -> String {
                path.split(separator: "/", omittingEmptySubsequences: false)
                    .map { $0.hasPrefix(":") || $0.hasPrefix("{") ? "{}" : String($0) }.joined(separator: "/")
            }
            let served = Set(router.routes.map { "\($0.method.rawValue) \(normalized($0.path.description))" })
            try await Application(router: router).test(.router) { client in
                let response = try await client.executeRequest(uri: "/openapi.yaml", method: .get, headers: [:], body: nil)
                #expect(response.status == .ok)
                #expect(response.headers[.contentType]?.hasPrefix("application/yaml") == true)
                let document = try #require(try Yams.load(yaml: String(buffer: response.body)) as? [String: Any])
                #expect(document["openapi"] as? String == "3.1.0")
                let paths = try #require(document["paths"] as? [String: Any])
                var documented: Set<String> = []
                for (path, item) in paths {
                    let operations = try #require(item as? [String: Any], "\(path)")
                    for method in ["get", "put", "post", "delete", "patch", "head", "options", "trace"] where operations[method] != nil {
                        documented.insert("\(method.uppercased()) \(normalized(path))")
                    }
                }
                #expect(served.subtracting(documented).isEmpty, "served but not documented: \(served.subtracting(documented).sorted())")
                #expect(documented.subtracting(served).isEmpty, "documented but not served: \(documented.subtracting(served).sorted())")
                #expect(served.count >= 13)
            }
        }
    }
}
