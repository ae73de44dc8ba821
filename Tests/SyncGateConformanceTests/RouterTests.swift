import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import SyncGateCore
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// The front's routes, as the router lists them.
@Suite(.timeLimit(.minutes(2))) struct RouterTests {
    /// Every `/v1` route sits behind the authenticator: a route added there cannot forget it.
    @Test(arguments: Driver.selected)
    func everyVersionOneRouteNeedsAToken(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let watcher = FeedWatcher(store: harness.store, interval: .seconds(1), limits: .init(), logger: StoreHarness.logger)
            let router = buildRouter(store: harness.store, watcher: watcher, authority: await TokenAuthority(secret: HTTPHarness.secret), configuration: .init())
            let routes = router.routes.map { (path: $0.path.description, method: $0.method) }
            let public_ = routes.filter { !$0.path.hasPrefix("/v1/") }.map(\.path).sorted()
            #expect(public_ == ["/healthz", "/metrics", "/readyz"], "a route outside /v1 is public: list it here on purpose")
            let versioned = routes.filter { $0.path.hasPrefix("/v1/") }
            #expect(versioned.count >= 4)
            try await Application(router: router).test(.router) { client in
                for route in versioned {
                    let path = route.path.replacingOccurrences(of: ":id", with: "1")
                    let response = try await client.executeRequest(uri: path, method: route.method, headers: [HTTPField.Name("X-Device-Id")!: "d1"], body: nil)
                    #expect(response.status == .unauthorized, "\(route.method) \(route.path)")
                    let body = try? JSONParser().parse(Array(response.body.readableBytesView))
                    #expect(body?.errorCode == "UNAUTHENTICATED", "\(route.method) \(route.path)")
                }
            }
        }
    }
}
