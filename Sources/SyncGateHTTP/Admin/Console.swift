import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Mustache
import NIOCore
import SyncGateCore
import SyncGateStorage
import SyncGateWire

/// The operator's web console on the admin listener (docs/admin.md#the-console): pages rendered
/// on the server from the templates in Resources/console (swift-mustache escapes every value;
/// job payloads and ids are user input), no script. It signs in with an admin key, kept in an
/// HttpOnly, SameSite=Strict cookie and checked like the API's bearer key at every request;
/// every form that changes something carries a token derived from that key (CSRF). Its actions
/// are the API's store functions, logged with the key's name.
struct Console: Sendable {
    let store: SyncStore
    let verifier: ServiceKeyVerifier
    /// Live connections (long-polls and event streams) open on this front.
    let liveConnections: @Sendable () -> Int
    let webhooks: (any WebhookAdministration)?
    let library: MustacheLibrary

    static let cookie = "syncgate_admin"
    static let root = "/admin/console"

    init(store: SyncStore, verifier: ServiceKeyVerifier, liveConnections: @escaping @Sendable () -> Int, webhooks: (any WebhookAdministration)?) throws {
        self.store = store
        self.verifier = verifier
        self.liveConnections = liveConnections
        self.webhooks = webhooks
        var templates: [String: MustacheTemplate] = [:]
        for (name, bytes) in [
            ("layout", PackageResources.layout_mustache), ("login", PackageResources.login_mustache), ("overview", PackageResources.overview_mustache),
            ("jobs", PackageResources.jobs_mustache), ("job", PackageResources.job_mustache), ("user", PackageResources.user_mustache),
            ("households", PackageResources.households_mustache), ("webhooks", PackageResources.webhooks_mustache),
        ] {
            templates[name] = try MustacheTemplate(string: String(decoding: bytes, as: UTF8.self))
        }
        library = MustacheLibrary(templates: templates)
    }

    func add(to router: Router<SyncRequestContext>) {
        router.get("\(Self.root)/console.css") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/css; charset=utf-8", .cacheControl: "max-age=3600"],
                     body: ResponseBody(byteBuffer: ByteBuffer(bytes: PackageResources.console_css)))
        }
        router.get("\(Self.root)/login", use: loginPage)
        router.post("\(Self.root)/login", use: login)
        let pages = router.group(RouterPath(Self.root)).add(middleware: ConsoleAuthenticator(verifier: verifier))
        pages.post("logout", use: logout)
        pages.get("", use: overview)
        pages.get("jobs", use: jobs)
        pages.get("jobs/:id", use: job)
        pages.post("jobs/:id/:action", use: jobAction)
        pages.get("households", use: households)
        pages.get("webhooks", use: webhookPage)
        pages.post("webhooks/:name/:action", use: webhookAction)
        pages.get("users", use: findUser)
        pages.get("users/:user", use: user)
        pages.get("users/:user/export", use: export)
        pages.post("users/:user/erase", use: erase)
    }

    // MARK: Signing in

    func loginPage(_ request: Request, context: SyncRequestContext) async throws -> Response {
        // No session yet, so no signed message: only the one refusal this page can be sent back with.
        page("login", [:], flash: request.uri.queryParameters["refused"] != nil ? "That is not a valid key with the admin scope." : nil)
    }

    func login(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let form = try await Self.form(request)
        let key = form["key"] ?? ""
        guard let service = try? await verifier.verify(key), service.scopes.contains(.admin) else {
            context.logger.notice("console sign-in refused")
            return Self.redirect("\(Self.root)/login?refused")
        }
        context.logger.notice("console sign-in", metadata: ["syncgate.service": "\(service.name)"])
        var response = Self.redirect(Self.root)
        response.setCookie(Cookie(name: Self.cookie, value: key, path: Self.root, httpOnly: true, sameSite: .strict))
        return response
    }

    func logout(_ request: Request, context: SyncRequestContext) async throws -> Response {
        _ = try checked(try await Self.form(request), context)
        var response = Self.redirect("\(Self.root)/login")
        response.setCookie(Cookie(name: Self.cookie, value: "", maxAge: 0, path: Self.root, httpOnly: true, sameSite: .strict))
        return response
    }

    // MARK: Pages

    func overview(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let overview = try await store.overview()
        let states = JobState.allCases.map { ["name": $0.rawValue, "count": overview["jobs"]?[$0.rawValue]?.intValue ?? 0] as [String: Any] }
        let webhooks = (overview["webhooks"]?.arrayValue ?? []).map { Self.plain($0) }
        let values: [String: Any] = [
            "states": states, "queueDepth": overview["queue_depth"]?.intValue ?? 0,
            "oldestQueued": overview["oldest_queued_age_ms"]?.intValue.map { Self.duration(milliseconds: $0) } ?? "none waiting",
            "liveConnections": liveConnections(), "nudgesPending": overview["nudges"]?["pending"]?.intValue ?? 0,
            "entities": overview["entities"]?.intValue ?? 0, "changes": overview["changes"]?.intValue ?? 0,
            "feeds": overview["feeds"]?.intValue ?? 0, "households": overview["households"]?.intValue ?? 0,
            "chart": Self.chart(try await store.finishedPerMinute(minutes: 60), now: Timestamp.now()),
            "webhooks": webhooks, "hasWebhooks": !webhooks.isEmpty,
            "replicas": (overview["replicas"]?.arrayValue ?? []).map { Self.plain($0) }, "hasReplicas": overview["replicas"]?.arrayValue?.isEmpty == false,
            "fronts": (overview["fronts"]?.arrayValue ?? []).map { Self.plain($0) }, "hasFronts": overview["fronts"]?.arrayValue?.isEmpty == false,
            "lastMaintenance": try await store.maintenanceRuns(limit: 1).first.map { run in
                "\(run["finished_at"]?.stringValue ?? "") (\(run["milliseconds"]?.intValue ?? 0) ms): \(run["deleted_jobs"]?.intValue ?? 0) jobs, "
                    + "\(run["compacted_changes"]?.intValue ?? 0) compacted changes, \(run["purged_tombstones"]?.intValue ?? 0) tombstones removed"
            } ?? "none recorded yet",
        ]
        return page("overview", values, context: context, flash: Self.flash(request, context))
    }

    func jobs(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let parameters = request.uri.queryParameters
        let state = parameters["state"].flatMap { JobState(rawValue: String($0)) }
        let user = parameters["user"].map(String.init).flatMap { $0.isEmpty ? nil : $0 }
        if let user, !IdentifierLimits.isValidUserID(user) {
            return Self.redirect("\(Self.root)/jobs", flash: "A user id is 1 to \(IdentifierLimits.userID) characters without control characters.", context)
        }
        let jobs = try await store.listJobs(JobFilter(state: state, userID: user, limit: 200))
        let values: [String: Any] = [
            "states": JobState.allCases.map { ["name": $0.rawValue, "selected": $0 == state] as [String: Any] },
            "user": user ?? "",
            "jobs": jobs.map { job -> [String: Any] in
                [
                    "id": job.id, "state": job.state.rawValue, "attempts": job.attempts, "maxAttempts": job.maximumAttempts,
                    "operations": job.operationCount, "user": job.userID, "userPath": Self.path(job.userID), "device": job.deviceID, "created": job.createdAt.rfc3339,
                    "lastError": job.lastError.map { String($0.prefix(160)) } ?? "",
                ]
            },
        ]
        return page("jobs", values, context: context, flash: Self.flash(request, context))
    }

    func job(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let id = try AdminRoutes.id(context)
        guard let detail = try await store.jobDetail(id: id) else { return Self.redirect("\(Self.root)/jobs", flash: "No job \(id).", context) }
        let json = detail.json
        let record = detail.record
        let listed = json["operation_list"]?.arrayValue ?? []
        let values: [String: Any] = [
            "id": id, "state": record.state.rawValue, "user": record.userID, "userPath": Self.path(record.userID), "device": record.deviceID, "attempts": record.attempts,
            "maxAttempts": record.maximumAttempts, "created": record.createdAt.rfc3339, "runAt": detail.runAt.rfc3339,
            "updated": detail.updatedAt.rfc3339, "finished": record.finishedAt?.rfc3339 ?? "–",
            "lease": detail.leaseOwner.map { "\($0) until \(detail.leaseExpiresAt?.rfc3339 ?? "?")" } ?? "none",
            "lastError": record.lastError ?? "", "operations": record.operationCount, "listed": listed.count,
            "listedFewer": listed.count < record.operationCount && json["payload_error"] == nil,
            "payloadError": json["payload_error"]?.stringValue ?? false,
            "operationList": listed.map { operation -> [String: Any] in
                [
                    "intent": operation["intent"]?.stringValue ?? "", "type": operation["entity_type"]?.stringValue ?? "",
                    "entityID": operation["entity_id"]?.stringValue ?? "", "household": operation["household_id"]?.stringValue ?? "",
                    "baseVersion": operation["base_version"]?.intValue ?? 0, "dataBytes": operation["data_bytes"]?.intValue.map(String.init) ?? "–",
                    "key": operation["idempotency_key"]?.stringValue ?? "",
                ]
            },
            "results": json["results"].flatMap { $0 == .null ? nil : $0.serialized() } ?? false,
            "errors": (json["errors"]?.arrayValue ?? []).map { Self.plain($0) }, "hasErrors": json["errors"]?.arrayValue?.isEmpty == false,
            "canRetry": JobAction.retry.applies(to: record.state), "canCancel": JobAction.cancel.applies(to: record.state),
            "canDelete": JobAction.delete.applies(to: record.state),
        ]
        return page("job", values, context: context, flash: Self.flash(request, context))
    }

    func jobAction(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let admin = try checked(try await Self.form(request), context)
        let id = try AdminRoutes.id(context)
        guard let action = JobAction(rawValue: try context.parameters.require("action")) else { throw ProtocolError(.notFound, "no such action") }
        let outcome = try await store.perform(action, onJob: id, by: "admin key '\(admin.name)', console")
        let message: String
        switch outcome {
        case .applied:
            context.logger.notice("job \(action.done) by an operator", metadata: ["syncgate.job": "\(id)", "syncgate.service": "\(admin.name)", "syncgate.via": "console"])
            message = "Job \(id) \(action.done)."
        case .notFound: message = "No job \(id)."
        case .refused(let state): message = "Job \(id) is \(state.rawValue): nothing done."
        case .waitsForLaterJobs: message = "Job \(id) stays dead: \(JobActionOutcome.laterJobsRule)."
        case .waitsForEarlierJobs: message = "Job \(id) is not cancelled: \(JobActionOutcome.earlierJobsRule)."
        }
        let target = outcome == .applied && action == .delete ? "\(Self.root)/jobs" : "\(Self.root)/jobs/\(id)"
        return Self.redirect(target, flash: message, context)
    }

    func households(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let after = request.uri.queryParameters["after"].map(String.init).flatMap {
            $0.isEmpty || $0.unicodeScalars.contains(where: IdentifierLimits.isControl) ? nil : $0
        }
        let listed = try await store.householdPage(userID: nil, after: after, limit: 200)
        var values: [String: Any] = [
            "households": listed.households.map { household -> [String: Any] in
                [
                    "id": household.id, "owner": household.ownerID, "ownerPath": Self.path(household.ownerID),
                    "state": household.archived ? "archived" : "active",
                    "members": household.members.sorted { $0.key < $1.key }.map { ["user": $0.key.id, "userPath": Self.path($0.key.id), "role": $0.value.rawValue] },
                ]
            },
        ]
        if case .string(let next)? = listed.json["after"] { values["next"] = Self.query(next) }
        return page("households", values, context: context)
    }

    /// Webhook subscriptions with their deliveries, and the nudges pending.
    func webhookPage(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let subscriptions = try await webhooks?.list() ?? []
        let nudges = try await store.nudgeBacklog()
        let values: [String: Any] = [
            "enabled": webhooks != nil,
            "subscriptions": subscriptions.map { subscription -> [String: Any] in
                var values = Self.plain(subscription)
                values["paused"] = subscription["paused_at"].map { $0 != .null } ?? false
                return values
            },
            "nudgesPending": nudges.pending,
            "oldestNudge": nudges.oldestPendingSince.map { Timestamp(millisecondsSinceEpoch: $0).rfc3339 } ?? "–",
        ]
        return page("webhooks", values, context: context, flash: Self.flash(request, context))
    }

    func webhookAction(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let admin = try checked(try await Self.form(request), context)
        let name = try context.parameters.require("name")
        let action = try context.parameters.require("action")
        guard let webhooks else { throw ProtocolError(.notFound, "webhooks are not served here") }
        let done: Bool
        switch action {
        case "pause": done = try await webhooks.pause(name: name)
        case "resume": done = try await webhooks.resume(name: name)
        default: throw ProtocolError(.notFound, "no such action")
        }
        if done {
            context.logger.notice("webhook \(action)d by an operator", metadata: ["syncgate.webhook": "\(name)", "syncgate.service": "\(admin.name)", "syncgate.via": "console"])
        }
        return Self.redirect("\(Self.root)/webhooks", flash: done ? "\(name): \(action)d." : "No subscription is named \(name).", context)
    }

    func findUser(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let id = request.uri.queryParameters["id"].map(String.init) ?? ""
        guard let user = try? ServiceRoutes.userID(.string(id)) else { return Self.redirect(Self.root, flash: "Give a user id.", context) }
        return Self.redirect("\(Self.root)/users/\(Self.path(user))")
    }

    func user(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let user = try AdminRoutes.user(context)
        let overview = try await store.userOverview(user)
        let values: [String: Any] = [
            "user": user, "userPath": Self.path(user), "userQuery": Self.query(user), "resyncEpoch": overview["resync_epoch"]?.intValue ?? 0,
            "devices": (overview["devices"]?.arrayValue ?? []).map { device -> [String: Any] in
                let push = device["push"] ?? .null
                return [
                    "device": device["device_id"]?.stringValue ?? "", "watermark": device["watermark"]?.intValue.map(String.init) ?? "–",
                    "lastJob": device["last_job_at"]?.stringValue ?? "–", "live": device["live"] == true ? "yes" : "no",
                    "push": push == .null ? "–" : "\(push["provider"]?.stringValue ?? "") · last sent \(push["last_sent_at"]?.stringValue ?? "never")"
                        + (push["last_error"]?.stringValue.map { " · \($0)" } ?? ""),
                ]
            },
            "households": (overview["households"]?.arrayValue ?? []).map { household -> [String: Any] in
                [
                    "id": household["household_id"]?.stringValue ?? "", "role": household["role"]?.stringValue ?? "–",
                    "owner": household["owner_id"]?.stringValue ?? "", "archived": household["archived"] == true ? "yes" : "no",
                ]
            },
            "feeds": (overview["feeds"]?.arrayValue ?? []).map { Self.plain($0) },
            "jobs": (overview["recent_jobs"]?.arrayValue ?? []).map { job -> [String: Any] in
                [
                    "id": job["id"]?.intValue ?? 0, "state": job["state"]?.stringValue ?? "", "device": job["device_id"]?.stringValue ?? "",
                    "created": job["created_at"]?.stringValue ?? "",
                ]
            },
        ]
        return page("user", values, context: context, flash: Self.flash(request, context))
    }

    func export(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let user = try AdminRoutes.user(context)
        context.logger.notice("user data exported by an operator", metadata: [
            "syncgate.user": "\(user)", "syncgate.service": "\(context.service?.name ?? "")", "syncgate.via": "console",
        ])
        let store = self.store
        return Response(
            status: .ok,
            headers: [.contentType: "application/json; charset=utf-8", .contentDisposition: "attachment; filename=\"syncgate-export.json\""],
            body: ResponseBody { writer in
                try await store.exportUser(user) { text in try await writer.write(ByteBuffer(string: text)) }
                try await writer.finish(nil)
            }
        )
    }

    func erase(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let form = try await Self.form(request)
        let admin = try checked(form, context)
        let user = try AdminRoutes.user(context)
        let back = "\(Self.root)/users/\(Self.path(user))"
        guard form["confirm"]?.sameBytes(as: user) == true else { return Self.redirect(back, flash: "Type the user id to confirm; nothing was erased.", context) }
        let message: String
        switch try await store.eraseUser(user) {
        case .erased:
            context.logger.notice("user erased by an operator", metadata: ["syncgate.user": "\(user)", "syncgate.service": "\(admin.name)", "syncgate.via": "console"])
            message = "\(user) was erased."
        case .leavingHouseholds(let job):
            message = "\(user) is leaving their households first (job \(job)); erase again once it finished."
        }
        return Self.redirect(back, flash: message, context)
    }

    // MARK: Helpers

    /// The signed-in operator, with a form's CSRF token checked: a POST that changes something.
    func checked(_ form: [String: String], _ context: SyncRequestContext) throws(ProtocolError) -> AuthenticatedService {
        guard let service = context.service, let key = context.consoleKey else { throw ProtocolError(.unauthenticated, "sign in first") }
        guard let token = form["csrf"], Self.constantTimeEqual(token, Self.csrfToken(key)) else {
            throw ProtocolError(.permissionDenied, "the form's token does not match this session; reload the page")
        }
        return service
    }

    static func csrfToken(_ key: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Data("syncgate-console-csrf".utf8), using: SymmetricKey(data: Data(key.utf8)))
        return mac.map { String(format: "%02x", $0) }.joined()
    }

    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let a = Array(a.utf8), b = Array(b.utf8)
        guard a.count == b.count else { return false }
        return zip(a, b).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }

    /// A form body (`application/x-www-form-urlencoded`, at most 64 KiB), read once per request.
    static func form(_ request: Request) async throws -> [String: String] {
        var request = request
        let body = try await request.collectBody(upTo: 64 << 10)
        var fields: [String: String] = [:]
        for pair in String(buffer: body).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { $0.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "" }
            if let name = parts.first, fields[name] == nil { fields[name] = parts.count > 1 ? parts[1] : "" }
        }
        return fields
    }

    func page(_ name: String, _ values: [String: Any], context: SyncRequestContext? = nil, flash: String? = nil) -> Response {
        var values = values
        if let service = context?.service {
            values["operator"] = service.name
            values["csrf"] = context?.consoleKey.map(Self.csrfToken) ?? ""
        }
        if let flash, !flash.isEmpty { values["flash"] = flash }
        let html = library.render(values, withTemplate: name) ?? ""
        return Response(
            status: .ok,
            // No script at all, and never inside another site's frame (a click there could act here).
            headers: [
                .contentType: "text/html; charset=utf-8", .cacheControl: "no-store",
                HTTPField.Name("Content-Security-Policy")!: "default-src 'self'; script-src 'none'; frame-ancestors 'none'",
                HTTPField.Name("X-Frame-Options")!: "DENY",
            ],
            body: ResponseBody(byteBuffer: ByteBuffer(string: html))
        )
    }

    static func redirect(_ location: String) -> Response {
        Response(status: .seeOther, headers: [.location: location])
    }

    /// A redirect whose page shows `message`, signed with the session's key: a page shows only
    /// messages this console wrote for this session, not text a link someone sent put there.
    static func redirect(_ path: String, flash message: String, _ context: SyncRequestContext) -> Response {
        let signature = context.consoleKey.map { flashSignature(message, key: $0) } ?? ""
        return redirect("\(path)?flash=\(query(message))&flash_sig=\(signature)")
    }

    /// The request's message, if this session's key signed it.
    static func flash(_ request: Request, _ context: SyncRequestContext) -> String? {
        let parameters = request.uri.queryParameters
        guard let message = parameters["flash"].map(String.init), let signature = parameters["flash_sig"].map(String.init),
            let key = context.consoleKey, constantTimeEqual(signature, flashSignature(message, key: key))
        else { return nil }
        return message
    }

    static func flashSignature(_ message: String, key: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Data("syncgate-console-flash:\(message)".utf8), using: SymmetricKey(data: Data(key.utf8)))
        return mac.map { String(format: "%02x", $0) }.joined()
    }

    static func query(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
    }

    static func path(_ segment: String) -> String {
        segment.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? ""
    }

    /// A JSON object's members as plain values for a template.
    static func plain(_ value: JSONValue) -> [String: Any] {
        guard case .object(let object) = value else { return [:] }
        return object.mapValues { member -> Any in
            if let text = member.stringValue { return text }
            if let number = member.intValue { return number }
            return member.serialized()
        }
    }

    static func duration(milliseconds: Int64) -> String {
        milliseconds < 1000 ? "\(milliseconds) ms" : milliseconds < 120_000 ? "\(milliseconds / 1000) s" : "\(milliseconds / 60_000) min"
    }

    /// An SVG bar chart of jobs finished per minute over the last hour: one bar per minute, dead
    /// jobs stacked over done ones.
    static func chart(_ minutes: [(minute: Int64, done: Int, dead: Int)], now: Timestamp) -> [String: Any] {
        let width = 600, height = 160, base = 148, slot = 10
        let start = (now.millisecondsSinceEpoch / 60_000 - 59) * 60_000
        let peak = max(1, minutes.map { $0.done + $0.dead }.max() ?? 1)
        var bars: [[String: Any]] = []
        for entry in minutes where entry.minute >= start {
            let x = Int((entry.minute - start) / 60_000) * slot
            let doneHeight = (entry.done * (base - 8)) / peak, deadHeight = (entry.dead * (base - 8)) / peak
            let label = "\(Timestamp(millisecondsSinceEpoch: entry.minute).rfc3339): \(entry.done) done, \(entry.dead) dead"
            if entry.done > 0 {
                bars.append(["x": x, "y": base - doneHeight, "width": slot - 2, "height": max(doneHeight, 1), "kind": "done", "label": label])
            }
            if entry.dead > 0 {
                bars.append(["x": x, "y": base - doneHeight - max(deadHeight, 1), "width": slot - 2, "height": max(deadHeight, 1), "kind": "dead", "label": label])
            }
        }
        return [
            "width": width, "height": height, "base": base, "bars": bars, "peak": peak,
            "total": minutes.reduce(0) { $0 + $1.done }, "dead": minutes.reduce(0) { $0 + $1.dead },
        ]
    }
}

/// Signs the console's pages in from the cookie's admin key, checked like the API's bearer key;
/// a browser without one is sent to the sign-in page.
struct ConsoleAuthenticator: RouterMiddleware {
    typealias Context = SyncRequestContext
    let verifier: ServiceKeyVerifier

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let key = request.cookies[Console.cookie]?.value, !key.isEmpty, let service = try? await verifier.verify(key), service.scopes.contains(.admin) else {
            return Console.redirect("\(Console.root)/login")
        }
        var context = context
        context.service = service
        context.consoleKey = key
        return try await next(request, context)
    }
}
