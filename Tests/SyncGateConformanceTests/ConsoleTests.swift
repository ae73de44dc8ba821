import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import SyncGateCore
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import SyncGateWire
import Testing

/// The admin console's pages (docs/admin.md#the-console), in memory: signing in, what a page
/// shows (escaped), and forms that act only with the session's token. The browser test
/// (scripts/test-console) drives the same pages in Chromium.
@Suite(.timeLimit(.minutes(10))) struct ConsoleTests {
    struct Page {
        var status: Int
        var body: String
        var headers: HTTPFields
    }

    static func request(
        _ client: any TestClientProtocol, _ method: HTTPRequest.Method, _ uri: String, cookie: String? = nil, form: String? = nil
    ) async throws -> Page {
        var headers: HTTPFields = [:]
        if let cookie { headers[.cookie] = "syncgate_admin=\(cookie)" }
        if form != nil { headers[.contentType] = "application/x-www-form-urlencoded" }
        let response = try await client.executeRequest(uri: uri, method: method, headers: headers, body: form.map { ByteBuffer(string: $0) })
        return Page(status: Int(response.status.code), body: String(buffer: response.body), headers: response.headers)
    }

    static func csrf(in page: String) throws -> String {
        let marker = #"name="csrf" value=""#
        let start = try #require(page.range(of: marker)).upperBound
        return String(page[start...].prefix { $0 != "\"" })
    }

    @Test(arguments: Driver.selected)
    func signingInTakesAnAdminKeyAndPagesEscapeWhatTheyShow(_ driver: Driver) async throws {
        try await AdminAPITests.with(driver, workers: 2) { http, admin, key in
            let writer = try await ServiceAPITests.key("writer", [.write], in: http.store.store)
            // Signed out: every page sends the browser to the sign-in page.
            let signedOut = try await Self.request(admin, .get, "/admin/console/jobs")
            #expect(signedOut.status == 303 && signedOut.headers[.location] == "/admin/console/login")
            #expect(try await Self.request(admin, .get, "/admin/console", cookie: writer).headers[.location] == "/admin/console/login")
            for refused in [writer, try await http.token("alice"), "sgk_nothing"] {
                let answer = try await Self.request(admin, .post, "/admin/console/login", form: "key=\(refused)")
                #expect(answer.headers[.location] == "/admin/console/login?refused", "\(answer.headers)")
                #expect(answer.headers[.setCookie] == nil)
            }
            let again = try await Self.request(admin, .get, "/admin/console/login?refused")
            #expect(again.body.contains("That is not a valid key with the admin scope."), "\(again.body)")
            let signedIn = try await Self.request(admin, .post, "/admin/console/login", form: "key=\(key)")
            #expect(signedIn.status == 303 && signedIn.headers[.location] == "/admin/console")
            let cookie = try #require(signedIn.headers[.setCookie])
            #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Path=/admin/console"), "\(cookie)")

            // A page shows user input as text.
            _ = try await http.results([Op.create("weightLogs", "<script>alert(1)</script>", ["kg": 70])])
            let jobs = try await Self.request(admin, .get, "/admin/console/jobs", cookie: key)
            #expect(jobs.status == 200 && jobs.body.contains("Sign out (ops)"), "\(jobs.body)")
            let id = try #require(try await http.store.store.listJobs(JobFilter(limit: 1)).first?.id)
            let job = try await Self.request(admin, .get, "/admin/console/jobs/\(id)", cookie: key)
            #expect(job.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;") && !job.body.contains("<script>"), "\(job.body)")
            #expect(job.headers[HTTPField.Name("Content-Security-Policy")!]?.contains("script-src 'none'") == true)
            #expect(job.headers[HTTPField.Name("Content-Security-Policy")!]?.contains("frame-ancestors 'none'") == true)
            let overview = try await Self.request(admin, .get, "/admin/console", cookie: key)
            #expect(overview.body.contains(#"<svg id="throughput""#) && overview.body.contains(#"class="done""#), "\(overview.body)")
        }
    }

    @Test(arguments: Driver.selected)
    func formsActOnlyWithTheSessionsToken(_ driver: Driver) async throws {
        try await AdminAPITests.with(driver) { http, admin, key in
            let id = try await http.store.push([Op.create("weightLogs", "w1", ["kg": 70])])
            let page = try await Self.request(admin, .get, "/admin/console/jobs/\(id)", cookie: key)
            #expect(page.body.contains(#"id="cancel""#) && !page.body.contains(#"id="retry""#), "\(page.body)")
            let token = try Self.csrf(in: page.body)

            // Without the token, or with another key's, nothing happens.
            #expect(try await Self.request(admin, .post, "/admin/console/jobs/\(id)/cancel", cookie: key, form: "").status == 403)
            #expect(try await Self.request(admin, .post, "/admin/console/jobs/\(id)/cancel", cookie: key, form: "csrf=\(String(repeating: "0", count: 64))").status == 403)
            let other = try await ServiceAPITests.key("ops2", [.admin], in: http.store.store)
            #expect(try await Self.request(admin, .post, "/admin/console/jobs/\(id)/cancel", cookie: other, form: "csrf=\(token)").status == 403)
            #expect(try await http.store.store.job(id: id, userID: "alice")?.state == .queued)

            let cancelled = try await Self.request(admin, .post, "/admin/console/jobs/\(id)/cancel", cookie: key, form: "csrf=\(token)")
            #expect(cancelled.status == 303 && cancelled.headers[.location]?.hasPrefix("/admin/console/jobs/\(id)?flash=") == true)
            // The page shows the message this session's action signed; text a link puts there, or
            // a message signed for another session, it does not.
            let location = try #require(cancelled.headers[.location])
            #expect(try await Self.request(admin, .get, location, cookie: key).body.contains(#"id="flash">Job \#(id) cancelled."#))
            let third = try await ServiceAPITests.key("ops3", [.admin], in: http.store.store)
            #expect(try await !Self.request(admin, .get, location, cookie: third).body.contains(#"id="flash""#))
            let forged = "/admin/console/jobs/\(id)?flash=Your%20key%20leaked%3A%20sign%20in%20at%20evil.example&flash_sig=00"
            #expect(try await !Self.request(admin, .get, forged, cookie: key).body.contains("evil.example"))
            #expect(try await !Self.request(admin, .get, "/admin/console/jobs/\(id)?flash=evil.example", cookie: key).body.contains("evil.example"))
            #expect(try await http.store.store.job(id: id, userID: "alice")?.state == .dead)
            let retried = try await Self.request(admin, .post, "/admin/console/jobs/\(id)/retry", cookie: key, form: "csrf=\(token)")
            #expect(retried.status == 303)
            #expect(try await http.store.store.job(id: id, userID: "alice")?.state == .queued)

            // Webhook subscriptions: listed with their deliveries, paused and resumed from the page.
            let created = try await AdminAPITests.post(admin, "/admin/v1/webhooks", key: key, body: #"{"name": "billing", "url": "http://127.0.0.1:9/hook"}"#)
            #expect(created.status == 201, "\(created)")
            let hooks = try await Self.request(admin, .get, "/admin/console/webhooks", cookie: key)
            #expect(hooks.body.contains("billing") && hooks.body.contains("/admin/console/webhooks/billing/pause"), "\(hooks.body)")
            #expect(try await Self.request(admin, .post, "/admin/console/webhooks/billing/pause", cookie: key, form: "").status == 403)
            _ = try await Self.request(admin, .post, "/admin/console/webhooks/billing/pause", cookie: key, form: "csrf=\(token)")
            let paused = try await AdminAPITests.send(admin, .get, "/admin/v1/webhooks", key: key)
            #expect(paused.json?["webhooks"]?[0]?["paused_at"] != .null, "\(String(describing: paused.json))")

            // Erasing needs the user id typed again.
            let user = try await Self.request(admin, .get, "/admin/console/users/alice", cookie: key)
            #expect(user.body.contains(#"id="erase""#))
            _ = try await Self.request(admin, .post, "/admin/console/users/alice/erase", cookie: key, form: "csrf=\(token)&confirm=bob")
            #expect(try await http.store.store.job(id: id, userID: "alice") != nil)
            let erased = try await Self.request(admin, .post, "/admin/console/users/alice/erase", cookie: key, form: "csrf=\(token)&confirm=alice")
            #expect(erased.headers[.location]?.contains("was%20erased") == true, "\(erased.headers)")
            #expect(try await http.store.store.job(id: id, userID: "alice") == nil)
        }
    }

    /// A user id may hold `/` or `|` (`team/bob`, `auth0|abc`): every link to a user's page
    /// percent-encodes it, and the households page pages by id.
    @Test(arguments: Driver.selected)
    func linksToAUserEncodeTheirIdAndHouseholdsComeInPages(_ driver: Driver) async throws {
        try await AdminAPITests.with(driver, workers: 2) { http, admin, key in
            let households = (0..<201).map { String(format: "h%03d", $0) }
            _ = try await http.results(households.map { Op.create("households", $0, [:]) } + [HouseholdTests.member("h000", "team/bob")], user: "auth0|abc")
            let first = try await Self.request(admin, .get, "/admin/console/households", cookie: key)
            #expect(first.body.contains(#"href="/admin/console/users/team%2Fbob""#) && first.body.contains(#"href="/admin/console/users/auth0%7Cabc""#), "\(first.body)")
            #expect(first.body.contains("h199") && !first.body.contains("h200"), "\(first.body)")
            #expect(first.body.contains(#"href="/admin/console/households?after=h199""#), "\(first.body)")
            let second = try await Self.request(admin, .get, "/admin/console/households?after=h199", cookie: key)
            #expect(second.body.contains("h200") && !second.body.contains("h199") && !second.body.contains("Next households"), "\(second.body)")
            let bob = try await Self.request(admin, .get, "/admin/console/users/team%2Fbob", cookie: key)
            #expect(bob.status == 200 && bob.body.contains(#"<span id="user-id">team/bob</span>"#), "\(bob.body)")
            #expect(bob.body.contains(#"action="/admin/console/users/team%2Fbob/erase""#) && bob.body.contains(#"href="/admin/console/jobs?user=team%2Fbob""#), "\(bob.body)")
        }
    }
}
