package import Hummingbird
package import SyncGateHTTP

/// A seed app whose own sync dialect a deployment can serve (docs/dialects.md).
package enum Dialect: String, CaseIterable, Sendable, Hashable, Comparable {
    /// `POST /sync/push`, `GET /sync/pull`, `GET|POST /sync/full`.
    case dietTracker = "diet-tracker"
    /// `GET /api/sync/changes`, `GET|POST /sync/full`.
    case pantryPal = "pantrypal"

    package static func < (lhs: Dialect, rhs: Dialect) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// The seed apps' dialects as a front plug-in: their routes behind the front's authenticator,
/// their reads over ``DialectStore``, their part of the OpenAPI document. Mounted by
/// configuration (`SYNCGATE_DIALECTS`); a deployment without it serves `/v1` only.
package struct DialectPlugin: FrontPlugin {
    package let dialects: Set<Dialect>
    package let store: DialectStore

    package init(_ dialects: Set<Dialect>, store: DialectStore) {
        self.dialects = dialects
        self.store = store
    }

    package func addRoutes(to router: Router<SyncRequestContext>, front: FrontRoutes) {
        guard !dialects.isEmpty else { return }
        let routes = DialectRoutes(sync: front.sync, store: store)
        let legacy = router.group("sync").add(middleware: front.authenticator)
        if dialects.contains(.dietTracker) {
            legacy.post("push", use: routes.dietPush)
            legacy.get("pull", use: routes.dietPull)
        }
        // Both apps' first launch and recovery.
        legacy.get("full", use: routes.full)
        legacy.post("full", use: routes.full)
        if dialects.contains(.pantryPal) {
            router.group("api/sync").add(middleware: front.authenticator).get("changes", use: routes.pantryChanges)
        }
    }

    package var openAPI: String { String(decoding: PackageResources.openapi_yaml, as: UTF8.self) }
}
