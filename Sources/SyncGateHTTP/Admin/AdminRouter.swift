import Foundation
package import Hummingbird
import Logging
import NIOCore
package import SyncGateStorage
import SyncGateCore
package import SyncGateWire

/// Builds the router of the admin listener (docs/admin.md): the operator's JSON API under
/// `/admin/v1`, behind a service key or identity-provider service token that grants `admin`
/// (never a user's token), `GET /admin/openapi.yaml`, its document, and the web console under
/// `/admin/console` (``Console``). The CLI's `syncgate admin` commands call the same store
/// functions. `liveConnections` counts this front's long-polls and event streams.
package func buildAdminRouter(
    store: SyncStore, authority: TokenAuthority, configuration: FrontConfiguration, settings: JSONValue = [],
    liveConnections: @escaping @Sendable () -> Int = { 0 }, maintain: @escaping @Sendable () async throws -> JSONValue = { ["ran": false] },
    webhooks: (any WebhookAdministration)? = nil
) throws -> Router<SyncRequestContext> {
    let router = Router(context: SyncRequestContext.self)
    let routes = RouteMethods()
    router.add(middleware: ProtocolErrorMiddleware(retryAfterSeconds: configuration.retryAfterSeconds, routes: routes))
    let verifier = ServiceKeyVerifier(store: store, cacheTime: configuration.serviceKeyCacheTime)
    let admin = router.group("admin/v1").add(middleware: ServiceKeyAuthenticator(verifier: verifier, authority: authority))
    AdminRoutes(store: store, settings: settings, maintain: maintain).add(to: admin)
    if let webhooks {
        let limit = configuration.maximumBodyBytes
        WebhookRoutes(administration: webhooks, readBody: { try await $0.body.collect(upTo: limit) }).add(to: admin)
    }
    try Console(store: store, verifier: verifier, liveConnections: liveConnections, webhooks: webhooks).add(to: router)
    // The document lists the webhook routes (the service API's, under /admin/v1) when served.
    var document = AdminRoutes.document
    if webhooks != nil {
        let served = Set(router.routes.map { "\($0.method.rawValue) \($0.path.description)" })
        let merged = try OpenAPIDocument.merged(
            base: String(decoding: document, as: UTF8.self), parts: [try OpenAPIDocument.adminWebhooksPart()], served: served
        )
        document = Array(merged.utf8)
    }
    router.get("/admin/openapi.yaml") { [document] _, _ in Response.openAPI(document) }
    routes.record(router.routes.map { ($0.path, $0.method) })
    return router
}

/// The admin API's routes; every one needs the `admin` scope, and every action is logged with
/// the key that took it.
///
/// - `GET /admin/v1/overview`: jobs by state, queue depth, the oldest queued job's age, table
///   sizes, pending nudges, webhook deliveries by subscription.
/// - `GET /admin/v1/households?user=&after=&limit=`: households with their members, a page by id.
/// - `GET /admin/v1/settings`: the settings this process was given, secrets redacted.
/// - `GET /admin/v1/maintenance`: the last 50 maintenance passes, whichever process ran them.
/// - `POST /admin/v1/jobs/retry-dead`, `POST /admin/v1/maintenance`, `POST /admin/v1/force-resync`,
///   `POST /admin/v1/users/{user_id}/force-resync`: as the CLI's commands of those names.
/// - `GET|POST /admin/v1/keys`, `DELETE /admin/v1/keys/{name}`: service keys (created ones shown once).
/// - `GET /admin/v1/jobs?state=&user=&limit=`: recent jobs, newest first.
/// - `GET /admin/v1/jobs/{id}`: one job in full (``JobDetail/json``).
/// - `POST /admin/v1/jobs/{id}/retry`: a dead job queued again; `POST …/cancel`: a job no worker
///   started finished `dead`; both answer the job. `DELETE /admin/v1/jobs/{id}`: a finished job, 204.
///   A job in another state is `409 STATE_CONFLICT`.
/// - `GET /admin/v1/users/{user_id}`: devices, households, feeds, recent jobs.
/// - `GET /admin/v1/users/{user_id}/export`: the user's data, streamed.
/// - `POST /admin/v1/users/{user_id}/erase` `{"confirm": user_id}`: 200 when erased, 202 with the
///   job that first leaves their households (erase again once it finished).
struct AdminRoutes: Sendable {
    let store: SyncStore
    let settings: JSONValue
    /// One maintenance pass now (the workers' module runs it): its report, or `{"ran": false}`.
    let maintain: @Sendable () async throws -> JSONValue

    static var document: [UInt8] { PackageResources.admin_openapi_yaml }

    func add(to group: RouterGroup<SyncRequestContext>) {
        group.get("overview", use: overview)
        group.get("households", use: households)
        group.get("settings", use: runningSettings)
        group.get("jobs", use: jobs)
        group.post("jobs/retry-dead", use: retryAllDead)
        group.get("jobs/:id", use: job)
        group.post("jobs/:id/retry", use: retry)
        group.post("jobs/:id/cancel", use: cancel)
        group.delete("jobs/:id", use: delete)
        group.get("users/:user", use: user)
        group.get("users/:user/export", use: export)
        group.post("users/:user/erase", use: erase)
        group.post("users/:user/force-resync", use: forceResync)
        group.post("force-resync", use: forceResync)
        group.post("maintenance", use: maintenance)
        group.get("maintenance", use: maintenanceRuns)
        group.get("keys", use: keys)
        group.post("keys", use: createKey)
        group.delete("keys/:name", use: revokeKey)
    }

    func overview(_ request: Request, context: SyncRequestContext) async throws -> Response {
        _ = try context.service(granting: .admin)
        _ = try RequestReader(request: request).query(allowed: [])
        return .json(try await store.overview())
    }

    func households(_ request: Request, context: SyncRequestContext) async throws -> Response {
        _ = try context.service(granting: .admin)
        let query = try RequestReader(request: request).query(allowed: ["user", "after", "limit"])
        let user = try query["user"].map { try ServiceRoutes.userID(.string($0)) }
        let limit = try RequestReader.integer(query, "limit", in: 1...1000, default: 100)
        if let after = query["after"], after.unicodeScalars.contains(where: IdentifierLimits.isControl) {
            throw ProtocolError(.validationError, "'after' must be a household id (no control characters)")
        }
        return .json(try await store.householdPage(userID: user, after: query["after"], limit: limit).json)
    }

    func runningSettings(_ request: Request, context: SyncRequestContext) async throws -> Response {
        _ = try context.service(granting: .admin)
        _ = try RequestReader(request: request).query(allowed: [])
        return .json(["settings": settings])
    }

    func jobs(_ request: Request, context: SyncRequestContext) async throws -> Response {
        _ = try context.service(granting: .admin)
        let parameters = try RequestReader(request: request).query(allowed: ["state", "user", "limit"])
        if let user = parameters["user"], !IdentifierLimits.isValidUserID(user) {
            throw ProtocolError(.validationError, "'user' must be 1 to \(IdentifierLimits.userID) characters without control characters")
        }
        var filter = JobFilter(userID: parameters["user"], limit: try RequestReader.integer(parameters, "limit", in: 1...1000, default: 50))
        if let state = parameters["state"] {
            guard let parsed = JobState(rawValue: state) else {
                throw ProtocolError(.validationError, "'state' must be one of \(JobState.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            filter.state = parsed
        }
        return .json(["jobs": .array(try await store.listJobs(filter).map(\.summaryJSON))])
    }

    func job(_ request: Request, context: SyncRequestContext) async throws -> Response {
        _ = try context.service(granting: .admin)
        _ = try RequestReader(request: request).query(allowed: [])
        return .json(try await detail(try Self.id(context)))
    }

    func act(_ action: JobAction, _ context: SyncRequestContext) async throws -> Int64 {
        let admin = try context.service(granting: .admin)
        let id = try Self.id(context)
        switch try await store.perform(action, onJob: id, by: "admin key '\(admin.name)'") {
        case .applied: break
        case .notFound: throw Self.unknown(id)
        case .refused(let state): throw ProtocolError(.stateConflict, "job \(id) is \(state.rawValue): \(action.rule)")
        case .waitsForLaterJobs: throw ProtocolError(.stateConflict, "job \(id) stays dead: \(JobActionOutcome.laterJobsRule)")
        case .waitsForEarlierJobs: throw ProtocolError(.stateConflict, "job \(id) is not cancelled: \(JobActionOutcome.earlierJobsRule)")
        }
        context.logger.notice("job \(action.done) by an operator", metadata: ["syncgate.job": "\(id)", "syncgate.service": "\(admin.name)"])
        return id
    }

    func retry(_ request: Request, context: SyncRequestContext) async throws -> Response {
        .json(try await detail(try await act(.retry, context)))
    }

    func cancel(_ request: Request, context: SyncRequestContext) async throws -> Response {
        .json(try await detail(try await act(.cancel, context)))
    }

    func delete(_ request: Request, context: SyncRequestContext) async throws -> Response {
        _ = try await act(.delete, context)
        return Response(status: .noContent)
    }

    func user(_ request: Request, context: SyncRequestContext) async throws -> Response {
        _ = try context.service(granting: .admin)
        _ = try RequestReader(request: request).query(allowed: [])
        return .json(try await store.userOverview(try Self.user(context)))
    }

    func export(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let admin = try context.service(granting: .admin)
        _ = try RequestReader(request: request).query(allowed: [])
        let user = try Self.user(context)
        context.logger.notice("user data exported by an operator", metadata: ["syncgate.user": "\(user)", "syncgate.service": "\(admin.name)"])
        let store = self.store
        return Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
            body: ResponseBody { writer in
                try await store.exportUser(user) { text in try await writer.write(ByteBuffer(string: text)) }
                try await writer.finish(nil)
            }
        )
    }

    func erase(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let admin = try context.service(granting: .admin)
        let user = try Self.user(context)
        let body = try await request.body.collect(upTo: 64 << 10)
        guard let value = try? JSONParser().parse(Array(body.readableBytesView)), value["confirm"]?.stringValue?.sameBytes(as: user) == true else {
            throw ProtocolError(.validationError, "erasing is final: confirm with the body {\"confirm\": \"<the user id>\"}")
        }
        switch try await store.eraseUser(user) {
        case .erased(let erased):
            context.logger.notice("user erased by an operator", metadata: ["syncgate.user": "\(user)", "syncgate.service": "\(admin.name)"])
            return .json(["status": "erased", "erased": erased.json])
        case .leavingHouseholds(let job):
            context.logger.notice("user leaving their households before an erase", metadata: [
                "syncgate.user": "\(user)", "syncgate.job": "\(job)", "syncgate.service": "\(admin.name)",
            ])
            return .json(["status": "leaving_households", "job_id": .int(job)], status: .accepted)
        }
    }

    func retryAllDead(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let admin = try context.service(granting: .admin)
        let count = try await store.retryDeadJobs(ids: nil)
        context.logger.notice("dead jobs retried by an operator", metadata: ["syncgate.jobs": "\(count)", "syncgate.service": "\(admin.name)"])
        return .json(["retried": .int(Int64(count))])
    }

    func forceResync(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let admin = try context.service(granting: .admin)
        let user = context.parameters.get("user") == nil ? nil : try Self.user(context)
        try await store.forceResync(userID: user)
        context.logger.notice("resync forced by an operator", metadata: ["syncgate.user": "\(user ?? "*")", "syncgate.service": "\(admin.name)"])
        return .json(["resync": .string(user ?? "*")])
    }

    func maintenance(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let admin = try context.service(granting: .admin)
        let report = try await maintain()
        context.logger.notice("maintenance pass run by an operator", metadata: ["syncgate.service": "\(admin.name)"])
        return .json(report)
    }

    func maintenanceRuns(_ request: Request, context: SyncRequestContext) async throws -> Response {
        _ = try context.service(granting: .admin)
        _ = try RequestReader(request: request).query(allowed: [])
        return .json(["runs": .array(try await store.maintenanceRuns())])
    }

    func keys(_ request: Request, context: SyncRequestContext) async throws -> Response {
        _ = try context.service(granting: .admin)
        _ = try RequestReader(request: request).query(allowed: [])
        return .json(["keys": .array(try await store.serviceKeys().map(\.json))])
    }

    func createKey(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let admin = try context.service(granting: .admin)
        let body = try await request.body.collect(upTo: 64 << 10)
        guard case .object(let object)? = try? JSONParser().parse(Array(body.readableBytesView)) else {
            throw ProtocolError(.validationError, "the body must be a JSON object {\"name\", \"scopes\"}")
        }
        guard let name = object["name"]?.stringValue, NewServiceKey.isValidName(name) else {
            throw ProtocolError(.validationError, "'name' is 1 to 64 characters of A-Z a-z 0-9 . _ -")
        }
        let names = object["scopes"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let scopes = Set(names.compactMap(ServiceScope.init))
        guard !scopes.isEmpty, scopes.count == names.count else { throw ProtocolError(.validationError, "'scopes' is a non-empty list of read, write and admin") }
        let reach = try Self.reach(object)
        if let refusal = NewServiceKey.refusal(scopes: scopes, reach: reach) { throw ProtocolError(.validationError, refusal) }
        let (key, stored) = ServiceKeySecret.new(name: name, scopes: scopes, reach: reach)
        guard try await store.createServiceKey(stored) else {
            throw ProtocolError(.stateConflict, "a key named '\(name)' exists (revoked keys keep their names)")
        }
        context.logger.notice("service key created by an operator", metadata: ["syncgate.key": "\(name)", "syncgate.service": "\(admin.name)"])
        return .json(
            ["name": .string(name), "key": .string(key), "scopes": .array(scopes.sorted().map { .string($0.rawValue) }), "reach": reach?.json ?? .null],
            status: .created
        )
    }

    /// A new key's reach: `users` and `households`, lists of ids; neither given: everyone.
    static func reach(_ object: JSONObject) throws(ProtocolError) -> ServiceReach? {
        guard object["users"] != nil || object["households"] != nil else { return nil }
        func ids(_ field: String) throws(ProtocolError) -> Set<String> {
            guard let value = object[field], !value.isNull else { return [] }
            guard let array = value.arrayValue, array.allSatisfy({ $0.stringValue != nil }) else {
                throw ProtocolError(.validationError, "'\(field)' is a list of ids")
            }
            return Set(array.compactMap(\.stringValue))
        }
        return ServiceReach(users: try ids("users"), households: try ids("households"))
    }

    func revokeKey(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let admin = try context.service(granting: .admin)
        let name = try context.parameters.require("name")
        guard try await store.revokeServiceKey(name: name) else { throw ProtocolError(.notFound, "no valid key is named '\(name.prefix(64))'") }
        context.logger.notice("service key revoked by an operator", metadata: ["syncgate.key": "\(name)", "syncgate.service": "\(admin.name)"])
        return Response(status: .noContent)
    }

    /// The user of a `users/:user` path. The router hands over the path segment as sent, so it
    /// is percent-decoded here: user ids may hold any printable character (`auth0|abc` arrives as
    /// `auth0%7Cabc` from a client that encodes its paths, as the console does).
    static func user(_ context: SyncRequestContext) throws -> String {
        let segment = try context.parameters.require("user")
        guard let user = segment.removingPercentEncoding else {
            throw ProtocolError(.validationError, "the user id in the path is not valid percent-encoding")
        }
        return try ServiceRoutes.userID(.string(user))
    }

    func detail(_ id: Int64) async throws -> JSONValue {
        guard let job = try await store.jobDetail(id: id) else { throw Self.unknown(id) }
        return job.json
    }

    static func id(_ context: SyncRequestContext) throws -> Int64 {
        let text = try context.parameters.require("id")
        guard let id = Int64(text), id > 0 else { throw ProtocolError(.validationError, "a job id is a positive integer, got '\(text.prefix(64))'") }
        return id
    }

    static func unknown(_ id: Int64) -> ProtocolError {
        ProtocolError(.notFound, "no job \(id)")
    }
}
