import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import SyncGateCore
import SyncGateHTTP
import SyncGateServer
import SyncGateStorage
import SyncGateTestSupport
import SyncGateWebhooks
import SyncGateWire
import Testing
import Yams

/// The admin API (docs/admin.md): an operator's view of the queue and actions on one job, on a
/// listener of its own, behind a service key with the `admin` scope.
@Suite(.timeLimit(.minutes(10))) struct AdminAPITests {
    /// The public front (`http`, no workers unless asked) and the admin API in memory on the same store.
    static func with(
        _ driver: Driver, workers: Int = 0, _ body: @Sendable (_ http: HTTPHarness, _ admin: any TestClientProtocol, _ key: String) async throws -> Void
    ) async throws {
        try await HTTPHarness.with(driver, workers: workers) { http in
            let key = try await ServiceAPITests.key("ops", [.admin], in: http.store.store)
            let webhooks = StoreWebhookAdministration(store: http.store.store, allowPrivate: true)
            let router = try buildAdminRouter(store: http.store.store, authority: http.authority, configuration: HTTPHarness.testConfiguration, webhooks: webhooks)
            try await Application(router: router).test(.router) { admin in
                try await body(http, admin, key)
            }
        }
    }

    static func send(
        _ client: any TestClientProtocol, _ method: HTTPRequest.Method, _ uri: String, key: String?
    ) async throws -> (status: Int, json: JSONValue?) {
        var headers: HTTPFields = [:]
        if let key { headers[.authorization] = "Bearer \(key)" }
        let response = try await client.executeRequest(uri: uri, method: method, headers: headers, body: nil)
        return (Int(response.status.code), try? JSONParser().parse(Array(response.body.readableBytesView)))
    }

    @Test(arguments: Driver.selected)
    func onlyAKeyWithTheAdminScopeIsLetIn(_ driver: Driver) async throws {
        try await Self.with(driver) { http, admin, key in
            let writer = try await ServiceAPITests.key("writer", [.read, .write], in: http.store.store)
            let userToken = try await http.token("alice")
            for path in ["/admin/v1/overview", "/admin/v1/jobs", "/admin/v1/jobs/1"] {
                #expect(try await Self.send(admin, .get, path, key: nil).json?.errorCode == "UNAUTHENTICATED", "\(path)")
                let asUser = try await Self.send(admin, .get, path, key: userToken)
                #expect(asUser.status == 401 && asUser.json?.errorCode == "UNAUTHENTICATED", "\(path): a user's token")
                let asWriter = try await Self.send(admin, .get, path, key: writer)
                #expect(asWriter.status == 403 && asWriter.json?.errorCode == "PERMISSION_DENIED", "\(path): no admin scope")
            }
            for (method, path) in [(HTTPRequest.Method.post, "/admin/v1/jobs/1/retry"), (.post, "/admin/v1/jobs/1/cancel"), (.delete, "/admin/v1/jobs/1")] {
                #expect(try await Self.send(admin, method, path, key: writer).status == 403, "\(method) \(path)")
            }
            let overview = try await Self.send(admin, .get, "/admin/v1/overview", key: key)
            #expect(overview.status == 200 && overview.json?["queue_depth"] == 0, "\(String(describing: overview.json))")
            #expect(overview.json?["nudges"]?["pending"] == 0 && overview.json?["webhooks"] == [], "\(String(describing: overview.json))")
            // The public port serves none of it.
            #expect(try await http.send(.get, "/admin/v1/overview", headers: [.authorization: "Bearer \(key)"]).status == 404)
        }
    }

    @Test(arguments: Driver.selected)
    func badRequestsAreRefusedAndChangeNothing(_ driver: Driver) async throws {
        try await Self.with(driver) { http, admin, key in
            let id = try await http.store.push([Op.create("weightLogs", "w1", ["kg": 70])])
            for path in ["/admin/v1/jobs?state=stuck", "/admin/v1/jobs?limit=0", "/admin/v1/jobs?colour=red", "/admin/v1/jobs/abc", "/admin/v1/jobs/-1",
                         "/admin/v1/overview?x=1", "/admin/v1/jobs?user=%00", "/admin/v1/jobs?user="] {
                let response = try await Self.send(admin, .get, path, key: key)
                #expect(response.status == 400 && response.json?.errorCode == "VALIDATION_ERROR", "\(path): \(response.status)")
            }
            #expect(try await Self.send(admin, .get, "/admin/v1/jobs/\(id + 1000)", key: key).json?.errorCode == "NOT_FOUND")
            #expect(try await Self.send(admin, .post, "/admin/v1/jobs/\(id + 1000)/cancel", key: key).status == 404)
            // A queued job can be neither retried nor deleted.
            let retried = try await Self.send(admin, .post, "/admin/v1/jobs/\(id)/retry", key: key)
            #expect(retried.status == 409 && retried.json?.errorCode == "STATE_CONFLICT", "\(String(describing: retried.json))")
            #expect(retried.json?["error"]?["message"]?.stringValue?.contains("queued") == true)
            #expect(try await Self.send(admin, .delete, "/admin/v1/jobs/\(id)", key: key).status == 409)
            #expect(try await http.store.store.job(id: id, userID: "alice")?.state == .queued)
        }
    }

    /// A job seen in the list and in full, cancelled (its waiting client answered, the user's next
    /// job no longer held behind it), retried, applied, then deleted.
    @Test(arguments: Driver.selected)
    func aJobIsShownCancelledRetriedAndDeleted(_ driver: Driver) async throws {
        try await Self.with(driver) { http, admin, key in
            let first = try await http.store.push([Op.create("weightLogs", "w1", ["kg": 70]), Op.delete("contacts", "c1", base: 1)])
            let second = try await http.store.push([Op.create("weightLogs", "w2", ["kg": 71])])

            let list = try await Self.send(admin, .get, "/admin/v1/jobs?state=queued&user=alice", key: key)
            #expect(list.json?["jobs"]?.arrayValue?.compactMap { $0["id"]?.intValue } == [second, first])
            let shown = try #require(try await Self.send(admin, .get, "/admin/v1/jobs/\(first)", key: key).json)
            #expect(shown["state"] == "queued" && shown["operations"] == 2 && shown["lease"] == .null && shown["results"] == .null)
            #expect(shown["operation_list"]?.arrayValue?.map { "\($0["intent"]?.stringValue ?? "")/\($0["entity_id"]?.stringValue ?? "")" } == ["create/w1", "delete/c1"])
            #expect(shown["operation_list"]?[0]?["data_bytes"]?.intValue == 9)

            // The device follows its job; an operator cancels it: the device is answered at once.
            let baseline = http.waiters
            async let followed = http.send(.get, "/v1/jobs/\(first)?wait=30000", headers: try await http.headers("alice"))
            try await http.waitForWaiters(1, beyond: baseline)
            let cancelled = try #require(try await Self.send(admin, .post, "/admin/v1/jobs/\(first)/cancel", key: key).json)
            #expect(cancelled["state"] == "dead" && cancelled["last_error"]?.stringValue?.contains("'ops'") == true, "\(cancelled)")
            let answer = try await followed
            #expect(answer.status == 200 && answer.json?["status"] == "dead", "\(String(describing: answer.json))")
            let results = answer.json?["results"]?.arrayValue ?? []
            #expect(results.count == 2 && results.allSatisfy { $0["error_code"] == "INTERNAL" && $0["retryable"] == true }, "\(results)")
            let again = try await Self.send(admin, .post, "/admin/v1/jobs/\(first)/cancel", key: key)
            #expect(again.status == 409 && again.json?.errorCode == "STATE_CONFLICT")

            // The user's next job is no longer held behind the cancelled one.
            _ = try await http.store.drain()
            #expect(try await http.store.store.job(id: second, userID: "alice")?.state == .done)
            let state = try await http.state()
            #expect(state["weightLogs/w1"] == nil && state["weightLogs/w2"] != nil)

            // Retried, the cancelled job applies after all.
            let retried = try await Self.send(admin, .post, "/admin/v1/jobs/\(first)/retry", key: key)
            #expect(retried.status == 200 && retried.json?["state"] == "queued" && retried.json?["attempts"] == 0, "\(String(describing: retried.json))")
            _ = try await http.store.drain()
            let done = try #require(try await Self.send(admin, .get, "/admin/v1/jobs/\(first)", key: key).json)
            #expect(done["state"] == "done" && done["results"]?.arrayValue?.count == 2, "\(done)")
            #expect(try await http.state()["weightLogs/w1"] != nil)
            #expect(try await Self.send(admin, .post, "/admin/v1/jobs/\(first)/retry", key: key).status == 409)

            #expect(try await Self.send(admin, .delete, "/admin/v1/jobs/\(first)", key: key).status == 204)
            #expect(try await Self.send(admin, .get, "/admin/v1/jobs/\(first)", key: key).status == 404)
            #expect(try await http.send(.get, "/v1/jobs/\(first)", headers: try await http.headers("alice")).status == 404)
            #expect(try await Self.send(admin, .delete, "/admin/v1/jobs/\(first)", key: key).status == 404)
            let overview = try #require(try await Self.send(admin, .get, "/admin/v1/overview", key: key).json)
            #expect(overview["jobs"]?["done"] == 1 && overview["queue_depth"] == 0, "\(overview)")
        }
    }

    /// Every failed attempt is kept with its time and number (the last 20), not only the last.
    @Test(arguments: Driver.selected)
    func aJobShowsEveryFailedAttempt(_ driver: Driver) async throws {
        try await Self.with(driver) { http, admin, key in
            let store = http.store.store
            let id = try await http.store.push([Op.create("weightLogs", "w1", ["kg": 70])])
            for attempt in 1...22 {
                let claimed = try #require(try await store.claimJobs(workerID: "test", limit: 1, leaseMilliseconds: 60_000).first)
                let settlement: JobSettlement = attempt < 22 ? .retry(afterMilliseconds: 0) : .dead(results: [])
                #expect(try await store.fail(claimed, error: "failure \(attempt)", settlement: settlement))
            }
            let shown = try #require(try await Self.send(admin, .get, "/admin/v1/jobs/\(id)", key: key).json)
            let errors = shown["errors"]?.arrayValue ?? []
            #expect(errors.compactMap { $0["error"]?.stringValue } == (3...22).map { "failure \($0)" }, "\(errors)")
            #expect(errors.compactMap { $0["attempt"]?.intValue } == Array(3...22), "\(errors)")
            #expect(errors.allSatisfy { $0["at"]?.stringValue.flatMap(Timestamp.init(rfc3339:)) != nil }, "\(errors)")
            #expect(shown["state"] == "dead" && shown["last_error"] == "failure 22")
        }
    }

    /// What the CLI does besides: service keys, retrying every dead job, forcing a resync.
    @Test(arguments: Driver.selected)
    func keysDeadJobsAndResyncsAsTheCLIDoes(_ driver: Driver) async throws {
        try await Self.with(driver) { http, admin, key in
            let created = try await Self.post(admin, "/admin/v1/keys", key: key, body: #"{"name": "billing", "scopes": ["write", "read"]}"#)
            #expect(created.status == 201 && created.json?["key"]?.stringValue?.hasPrefix("sgk_") == true && created.json?["scopes"] == ["read", "write"])
            #expect(try await Self.post(admin, "/admin/v1/keys", key: key, body: #"{"name": "billing", "scopes": ["read"]}"#).json?.errorCode == "STATE_CONFLICT")
            let kiosk = try await Self.post(admin, "/admin/v1/keys", key: key, body: #"{"name": "kiosk", "scopes": ["write"], "users": ["bob"], "households": ["home"]}"#)
            #expect(kiosk.status == 201 && kiosk.json?["reach"] == ["users": ["bob"], "households": ["home"]], "\(String(describing: kiosk.json))")
            for bad in [
                #"{"name": "bad name", "scopes": ["read"]}"#, #"{"name": "x", "scopes": []}"#, #"{"name": "x", "scopes": ["root"]}"#, "[]",
                #"{"name": "x", "scopes": ["admin"], "users": ["bob"]}"#, #"{"name": "x", "scopes": ["read"], "users": []}"#,
                #"{"name": "x", "scopes": ["read"], "users": [7]}"#, #"{"name": "x", "scopes": ["read"], "households": "home"}"#,
            ] {
                #expect(try await Self.post(admin, "/admin/v1/keys", key: key, body: bad).status == 400, "\(bad)")
            }
            let listed = try await Self.send(admin, .get, "/admin/v1/keys", key: key)
            #expect(listed.json?["keys"]?.arrayValue?.compactMap { $0["name"]?.stringValue } == ["billing", "kiosk", "ops"])
            #expect(listed.json?["keys"]?[0]?["reach"] == .null && listed.json?["keys"]?[1]?["reach"] == ["users": ["bob"], "households": ["home"]])
            #expect(try await Self.send(admin, .delete, "/admin/v1/keys/billing", key: key).status == 204)
            #expect(try await Self.send(admin, .delete, "/admin/v1/keys/billing", key: key).status == 404)

            let id = try await http.store.push([Op.create("weightLogs", "w1", ["kg": 70])])
            _ = try await Self.post(admin, "/admin/v1/jobs/\(id)/cancel", key: key, body: "")
            let retried = try await Self.post(admin, "/admin/v1/jobs/retry-dead", key: key, body: "")
            #expect(retried.json?["retried"] == 1)
            #expect(try await http.store.store.job(id: id, userID: "alice")?.state == .queued)

            _ = try await http.store.drain()
            let cursor = try await http.pullAll().cursor
            #expect(try await Self.post(admin, "/admin/v1/users/alice/force-resync", key: key, body: "").json?["resync"] == "alice")
            #expect(try await http.pull(query: "cursor=\(cursor)").json?["force_resync"] == true)
            #expect(try await Self.post(admin, "/admin/v1/force-resync", key: key, body: "").json?["resync"] == "*")
        }
    }

    /// The overview counts the devices live on each front whose presence is fresh.
    @Test(arguments: Driver.selected)
    func theOverviewCountsLiveDevicesPerFront(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let devices = [DeviceKey(userID: "alice", deviceID: "d1"), DeviceKey(userID: "bob", deviceID: "d1")]
            _ = try await harness.store.publishPresence(front: "front-a", added: devices, removed: [], lifetimeMilliseconds: 600_000)
            // A front whose heartbeat has run out (it died) counts no longer.
            _ = try await harness.store.publishPresence(front: "front-gone", added: devices, removed: [], lifetimeMilliseconds: -1000)
            let fronts = try await harness.store.overview()["fronts"]
            #expect(fronts == [["front": "front-a", "live_devices": 2]], "\(String(describing: fronts))")
        }
    }

    /// The last 50 maintenance passes are kept, newest first.
    @Test(arguments: Driver.selected)
    func theLastFiftyMaintenancePassesAreKept(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            for pass in 1...55 {
                try await harness.store.recordMaintenanceRun(milliseconds: Int64(pass), report: ["deleted_jobs": .int(Int64(pass))])
            }
            let runs = try await harness.store.maintenanceRuns()
            #expect(runs.compactMap { $0["milliseconds"]?.intValue } == Array((6...55).reversed()), "\(runs)")
            #expect(runs.first?["deleted_jobs"] == 55)
        }
    }

    /// A job whose stored payload no longer decodes is shown as such, and can still be cancelled.
    @Test(arguments: Driver.selected)
    func aJobWithAnUnreadablePayloadIsShownAndCancelled(_ driver: Driver) async throws {
        try await Self.with(driver) { http, admin, key in
            let id = try await http.store.push([Op.create("weightLogs", "w1", ["kg": 70])])
            try await http.store.execute("UPDATE jobs SET payload = 'not a payload' WHERE id = \(id)")
            let shown = try #require(try await Self.send(admin, .get, "/admin/v1/jobs/\(id)", key: key).json)
            #expect(shown["payload_error"]?.stringValue?.isEmpty == false && shown["operation_list"] == nil, "\(shown)")
            let cancelled = try await Self.send(admin, .post, "/admin/v1/jobs/\(id)/cancel", key: key)
            #expect(cancelled.status == 200 && cancelled.json?["state"] == "dead" && cancelled.json?["results"] == [])
        }
    }

    static func post(_ client: any TestClientProtocol, _ uri: String, key: String, body: String) async throws -> (status: Int, json: JSONValue?) {
        let response = try await client.executeRequest(
            uri: uri, method: .post, headers: [.authorization: "Bearer \(key)", .contentType: "application/json"], body: ByteBuffer(string: body)
        )
        return (Int(response.status.code), try? JSONParser().parse(Array(response.body.readableBytesView)))
    }

    /// A body past the admin listener's cap is 413 PAYLOAD_TOO_LARGE, as on the public port,
    /// not a 500: on the API's routes and the console's sign-in form (no key needed for that).
    @Test func anOversizedAdminBodyIs413() async throws {
        try await Self.with(.sqlite) { http, admin, key in
            let big = String(repeating: " ", count: 70 << 10)
            for uri in ["/admin/v1/users/bob/erase", "/admin/v1/keys"] {
                let answer = try await Self.post(admin, uri, key: key, body: #"{"confirm": "bob"}"# + big)
                #expect(answer.status == 413 && answer.json?.errorCode == "PAYLOAD_TOO_LARGE", "\(uri): \(answer)")
            }
            let login = try await ConsoleTests.request(admin, .post, "/admin/console/login", form: "key=x" + big)
            #expect(login.status == 413, "\(login.status) \(login.body.prefix(200))")
        }
    }

    /// Erases `user` as an operator does: confirmed, the household job (if any) waited for.
    static func erase(_ user: String, http: HTTPHarness, admin: any TestClientProtocol, key: String) async throws -> JSONValue {
        let uri = "/admin/v1/users/\(user)/erase", confirm = #"{"confirm": "\#(user)"}"#
        var answer = try await Self.post(admin, uri, key: key, body: confirm)
        if answer.status == 202, let job = answer.json?["job_id"]?.intValue {
            #expect(answer.json?["status"] == "leaving_households")
            #expect(try await http.store.waitFinished(job, user: user).state == .done)
            answer = try await Self.post(admin, uri, key: key, body: confirm)
        }
        #expect(answer.status == 200 && answer.json?["status"] == "erased", "\(answer)")
        return answer.json?["erased"] ?? .null
    }

    /// A member of a household is shown, exported and erased: their own data, jobs, keys and
    /// devices go, their devices resync to nothing, the household keeps what they wrote there
    /// (naming no writer), and another user is untouched.
    @Test(arguments: Driver.selected)
    func aUserIsShownExportedAndErased(_ driver: Driver) async throws {
        try await Self.with(driver, workers: 2) { http, admin, key in
            _ = try await http.results([
                Op.create("households", "home", ["name": "Home"]), HouseholdTests.member("home", "bob"), Op.create("weightLogs", "a1", ["kg": 60]),
            ], user: "alice")
            _ = try await http.results([
                Op.create("weightLogs", "b1", ["kg": 80]), Op.create("inventory", "eggs", ["quantity": 12], household: "home"),
                Op.create("weightLogs", "b2", ["kg": 81]), Op.delete("weightLogs", "b2", base: 1),
            ], user: "bob")
            let before = try await http.pullAll(user: "bob", device: "d1")
            #expect(before.changes.count >= 3)
            let registered = try await http.send(.put, "/v1/devices/current/push", headers: try await http.headers("bob"), body: #"{"provider":"fcm","token":"fcm:bob-phone"}"#)
            #expect(registered.status == 200)

            let shown = try #require(try await Self.send(admin, .get, "/admin/v1/users/bob", key: key).json)
            #expect(shown["devices"]?.arrayValue?.compactMap { $0["device_id"]?.stringValue } == ["d1"], "\(shown)")
            #expect(shown["devices"]?[0]?["push"]?["provider"] == "fcm" && shown["devices"]?[0]?["watermark"] != .null, "\(shown)")
            #expect(shown["households"]?[0]?["household_id"] == "home" && shown["households"]?[0]?["role"] == "member")
            #expect(Set(shown["feeds"]?.arrayValue?.compactMap { $0["scope"]?.stringValue } ?? []) == ["u:bob", "h:home"])
            let tombstones = Dictionary(uniqueKeysWithValues: (shown["feeds"]?.arrayValue ?? []).map { ($0["scope"]?.stringValue ?? "", $0["tombstones"]) })
            #expect(tombstones == ["u:bob": 1, "h:home": 0], "\(shown)")

            let exported = try await admin.executeRequest(uri: "/admin/v1/users/bob/export", method: .get, headers: [.authorization: "Bearer \(key)"], body: nil)
            let export = try #require(try? JSONParser().parse(Array(exported.body.readableBytesView)), "\(String(buffer: exported.body))")
            #expect(export["entities"]?.arrayValue?.map { "\($0["entity_type"]?.stringValue ?? "")/\($0["entity_id"]?.stringValue ?? "")" } == ["weightLogs/b1"])
            #expect(export["households"]?[0]?["role"] == "member" && export["devices"]?[0]?["device_id"] == "d1")

            // Not without confirming it.
            #expect(try await Self.post(admin, "/admin/v1/users/bob/erase", key: key, body: "{}").status == 400)
            #expect(try await Self.post(admin, "/admin/v1/users/bob/erase", key: key, body: #"{"confirm": "alice"}"#).status == 400)
            // Another Unicode form of the id names another user: no confirmation.
            #expect(try await Self.post(admin, "/admin/v1/users/jose%CC%81/erase", key: key, body: #"{"confirm": "jos\u00e9"}"#).status == 400)

            let erased = try await Self.erase("bob", http: http, admin: admin, key: key)
            // The devices: d1, and the erase's own that left the household (its change there too).
            #expect(erased["entities"]?.intValue == 2 && erased["devices"] == 2 && erased["household_changes_unattributed"] == 2, "\(erased)")
            #expect((erased["jobs"]?.intValue ?? 0) >= 2 && (erased["idempotency_records"]?.intValue ?? 0) >= 2, "\(erased)")
            // The device's push address goes with it (docs/push.md).
            #expect(erased["push_registrations"] == 1, "\(erased)")
            #expect(try await http.store.queryTexts("SELECT user_id FROM push_registrations").isEmpty)

            // Bob's device drops its data at its next pull, and finds nothing to pull again.
            let after = try await http.pull(user: "bob", device: "d1", query: "cursor=\(before.cursor)")
            #expect(after.json?["force_resync"] == true, "\(String(describing: after.json))")
            #expect(try await http.pullAll(user: "bob", device: "d1").changes.isEmpty)
            let empty = try #require(try await Self.send(admin, .get, "/admin/v1/users/bob", key: key).json)
            #expect(empty["devices"] == [] && empty["households"] == [] && empty["recent_jobs"] == [], "\(empty)")

            // Alice keeps her data and the household, with Bob's eggs, written by nobody now.
            let alice = try await http.state(user: "alice")
            #expect(alice["weightLogs/a1"] != nil && alice["inventory/eggs"] != nil && alice["household_members/home:bob"]?["data"] == .null)
            #expect(try await http.store.queryTexts("SELECT scope FROM changes WHERE writer LIKE '%/bob'").isEmpty)
            #expect(try await http.store.queryTexts("SELECT scope FROM changes WHERE writer LIKE '%/alice'").count >= 3)
        }
    }

    /// An owner's households are archived (an owner cannot leave): their members lose them.
    @Test(arguments: Driver.selected)
    func erasingAnOwnerArchivesTheirHousehold(_ driver: Driver) async throws {
        try await Self.with(driver, workers: 2) { http, admin, key in
            _ = try await http.results([Op.create("households", "home", ["name": "Home"]), HouseholdTests.member("home", "bob")], user: "alice")
            let cursor = try await http.pullAll(user: "bob").cursor
            _ = try await Self.erase("alice", http: http, admin: admin, key: key)
            let next = try await http.pull(user: "bob", query: "cursor=\(cursor)")
            #expect(next.json?["scopes"]?["removed"] == ["home"], "\(String(describing: next.json))")
            let bob = try #require(try await Self.send(admin, .get, "/admin/v1/users/bob", key: key).json)
            #expect(bob["households"]?[0]?["archived"] == true, "\(bob)")
            let households = try #require(try await Self.send(admin, .get, "/admin/v1/households?user=bob", key: key).json)
            #expect(households["households"]?[0]?["members"] == [["user_id": "bob", "role": "member"]], "\(households)")
        }
    }

    /// The households list comes in pages by id (a deployment holds many), the same shape as
    /// `syncgate admin households --json`.
    @Test(arguments: Driver.selected)
    func householdsComeInPagesById(_ driver: Driver) async throws {
        try await Self.with(driver, workers: 2) { http, admin, key in
            _ = try await http.results(["h3", "h1", "h2"].map { Op.create("households", $0, ["name": .string($0)]) } + [HouseholdTests.member("h2", "bob")], user: "alice")
            var listed: [JSONValue] = []
            var query = "limit=2"
            for _ in 0..<3 {
                let page = try await Self.send(admin, .get, "/admin/v1/households?\(query)", key: key)
                #expect(page.status == 200, "\(String(describing: page.json))")
                listed += page.json?["households"]?.arrayValue ?? []
                guard page.json?["has_more"] == true, case .string(let after)? = page.json?["after"] else { break }
                query = "limit=2&after=\(after)"
            }
            #expect(listed.map { $0["household_id"] } == ["h1", "h2", "h3"], "\(listed)")
            #expect(listed[1]["members"] == [["user_id": "alice", "role": "owner"], ["user_id": "bob", "role": "member"]], "\(listed)")
            let last = try #require(try await Self.send(admin, .get, "/admin/v1/households?after=h2", key: key).json)
            #expect(last["households"]?.arrayValue?.count == 1 && last["has_more"] == false && last["after"] == .null, "\(last)")
            let bobs = try #require(try await Self.send(admin, .get, "/admin/v1/households?user=bob&limit=1", key: key).json)
            #expect(bobs["households"]?[0]?["household_id"] == "h2" && bobs["has_more"] == false, "\(bobs)")
            for bad in ["limit=0", "limit=1001", "limit=x", "page=2", "after=%00"] {
                #expect(try await Self.send(admin, .get, "/admin/v1/households?\(bad)", key: key).status == 400, "\(bad)")
            }
        }
    }

    /// Erasing a user unattributes their changes in households, not those of a user whose id
    /// ends the same way (`team/bob` against `bob`: user ids may hold `/`).
    @Test(arguments: Driver.selected)
    func anEraseUnattributesOnlyItsUsersChanges(_ driver: Driver) async throws {
        try await Self.with(driver, workers: 2) { http, admin, key in
            _ = try await http.results([
                Op.create("households", "home", ["name": "Home"]), HouseholdTests.member("home", "bob"), HouseholdTests.member("home", "team/bob"),
            ], user: "alice")
            _ = try await http.results([Op.create("inventory", "eggs", ["quantity": 12], household: "home")], user: "bob")
            _ = try await http.results([Op.create("inventory", "milk", ["quantity": 1], household: "home")], user: "team/bob")
            func writers() async throws -> [String] {
                try await http.store.queryTexts("SELECT coalesce(writer, '-') FROM changes WHERE scope = 'h:home' AND entity_type = 'inventory' ORDER BY entity_id")
            }
            #expect(try await writers() == ["d1/bob", "d1/team/bob"])
            _ = try await Self.erase("bob", http: http, admin: admin, key: key)
            #expect(try await writers() == ["-", "d1/team/bob"])
        }
    }

    /// An erased user's feed goes on from its head: a token still valid writes at the next
    /// sequence number, never again at 1 (a front's watch table, whose heads only rise, would
    /// take the old head for news and move a waiting cursor past the new changes).
    @Test(arguments: Driver.selected)
    func anErasedUsersFeedGoesOnFromItsHead(_ driver: Driver) async throws {
        try await Self.with(driver, workers: 2) { http, admin, key in
            _ = try await http.results((1...3).map { Op.create("weightLogs", "w\($0)", ["kg": 60]) }, user: "bob")
            _ = try await Self.erase("bob", http: http, admin: admin, key: key)
            #expect(try await http.pullAll(user: "bob", device: "d2").changes.isEmpty)
            _ = try await http.results([Op.create("weightLogs", "again", ["kg": 61])], user: "bob", device: "d2")
            #expect(try await http.store.queryTexts("SELECT CAST(seq AS text) FROM changes WHERE scope = 'u:bob'") == ["4"])
            let page = try await http.pullAll(user: "bob", device: "d2")
            #expect(page.changes.map { $0["entity_id"] } == ["again"])
        }
    }

    /// The erase's transaction deletes the user's memberships of archived households only: one
    /// an owner's job added after the erase checked for active ones is that household's data
    /// (its membership entity stays in the feed), and deleting the row alone would split them.
    @Test(arguments: Driver.selected)
    func anEraseKeepsMembershipsOfLiveHouseholds(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            _ = try await harness.apply([Op.create("households", "old", ["name": "Old"]), HouseholdTests.member("old", "bob")], user: "alice")
            _ = try await harness.apply([Op.delete("households", "old", base: 1)], user: "alice")
            _ = try await harness.apply([Op.create("households", "home", ["name": "Home"]), HouseholdTests.member("home", "bob")], user: "alice")
            _ = try await harness.store.driver.transaction(now: nil, for: .maintenance) { try await $0.eraseUser("bob", households: ["old"]) }
            let rows = try await harness.queryTexts("SELECT household_id FROM household_members WHERE user_id = 'bob' ORDER BY household_id")
            #expect(rows == ["home"])
        }
    }

    /// The second call of an erase finds the households the first one's job left even after
    /// the job retention has passed: retention keeps the erase's jobs until the erase ends.
    @Test(arguments: Driver.selected)
    func anEraseFinishedAfterTheJobRetentionStillUnattributes(_ driver: Driver) async throws {
        try await Self.with(driver, workers: 2) { http, admin, key in
            _ = try await http.results([Op.create("households", "home", ["name": "Home"]), HouseholdTests.member("home", "bob")], user: "alice")
            _ = try await http.results([Op.create("inventory", "eggs", ["quantity": 12], household: "home")], user: "bob")
            let uri = "/admin/v1/users/bob/erase", confirm = #"{"confirm": "bob"}"#
            let leaving = try await Self.post(admin, uri, key: key, body: confirm)
            let job = try #require(leaving.json?["job_id"]?.intValue, "\(leaving)")
            #expect(try await http.store.waitFinished(job, user: "bob").state == .done)
            // Every finished job is past its retention: bob's push goes, the erase's job stays.
            #expect(try await http.store.store.deleteFinishedJobs(olderThanMilliseconds: -60_000) >= 1)
            #expect(try await http.store.store.job(id: job, userID: "bob") != nil)
            let erased = try await Self.post(admin, uri, key: key, body: confirm)
            #expect(erased.status == 200 && erased.json?["status"] == "erased", "\(erased)")
            let writers = try await http.store.queryTexts("SELECT coalesce(writer, '-') FROM changes WHERE scope = 'h:home' AND entity_type = 'inventory'")
            #expect(writers == ["-"], "\(writers)")
        }
    }

    /// User ids may hold any printable character: a client that encodes its paths (the console
    /// does) sends `auth0|abc 1` as `auth0%7Cabc%201`, and that is the user it means.
    @Test(arguments: Driver.selected)
    func aUserIdInThePathIsPercentDecoded(_ driver: Driver) async throws {
        try await Self.with(driver, workers: 1) { http, admin, key in
            let user = "auth0|abc 1"
            _ = try await http.results([Op.create("weightLogs", "w1", ["kg": 60])], user: user)
            let path = "/admin/v1/users/auth0%7Cabc%201"
            let shown = try #require(try await Self.send(admin, .get, path, key: key).json)
            #expect(shown["devices"]?.arrayValue?.count == 1, "\(shown)")
            let exported = try await admin.executeRequest(uri: "\(path)/export", method: .get, headers: [.authorization: "Bearer \(key)"], body: nil)
            let export = try #require(try? JSONParser().parse(Array(exported.body.readableBytesView)), "\(String(buffer: exported.body))")
            #expect(export["entities"]?.arrayValue?.compactMap { $0["entity_id"]?.stringValue } == ["w1"], "\(export)")
            // Not percent-encoding at all: refused, not read as another user.
            #expect(try await Self.send(admin, .get, "/admin/v1/users/bad%E", key: key).status == 400)
        }
    }

    /// `SYNCGATE_ADMIN_PORT`: `serve` answers the admin API there, on its own socket, with the
    /// public port's connection limits.
    @Test func serveListensForTheAdminAPIOnItsOwnPort() async throws {
        let port = SyncGateProcess.freePort()
        var limits = HTTPHarness.testConfiguration
        limits.requestReadTimeout = .seconds(1)
        limits.idleTimeout = .seconds(2)
        let front = limits
        try await StoreHarness.with(.sqlite) { store in
            let server: @Sendable (inout ServerConfiguration) -> Void = {
                $0.adminPort = port
                $0.adminHost = "127.0.0.1"
                $0.configured = [("SYNCGATE_ADMIN_PORT", "\(port)"), ("SYNCGATE_JWT_SECRET", "<redacted>")]
            }
            try await HTTPHarness.run(store: store, setup: .live, configuration: front, workers: 0, server: server) { http in
                let key = try await ServiceAPITests.key("ops", [.admin], in: store.store)
                let client = AdminClient(port: port)
                var answered: (status: Int, json: JSONValue?)?
                try await eventually("the admin listener answers") {
                    answered = try? await client.get("/admin/v1/overview", key: key)
                    return answered != nil
                }
                let response = try #require(answered)
                #expect(response.status == 200 && response.json?["queue_depth"] == 0, "\(response)")
                #expect(try await client.get("/admin/openapi.yaml", key: nil).status == 200)
                #expect(try await client.get("/admin/v1/webhooks", key: key).json?["webhooks"] == [])
                let pass = try await client.send(.post, "/admin/v1/maintenance", key: key)
                #expect(pass.status == 200 && pass.json?["ran"] == true && pass.json?["deleted_jobs"] == 0, "\(pass)")
                let runs = try await client.get("/admin/v1/maintenance", key: key).json?["runs"]?.arrayValue ?? []
                #expect(runs.count == 1 && runs.first?["milliseconds"]?.intValue != nil && runs.first?["compacted_changes"] == 0, "\(runs)")
                let settings = try await client.get("/admin/v1/settings", key: key).json?["settings"]
                #expect(settings?[1] == ["name": "SYNCGATE_JWT_SECRET", "value": "<redacted>"], "\(String(describing: settings))")
                // The public port does not serve it (a new connection: the test client's own may
                // have been closed idle by now).
                #expect(try await AdminClient(port: try #require(http.client.port)).get("/admin/openapi.yaml", key: nil).status == 404)
                // A request head that never ends is cut at the idle timeout, as on the public port.
                let head = try await RawConnection.open(port: port, sending: "GET /admin/openapi.yaml HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                #expect(await head.trickle(every: .milliseconds(100), for: hangGuard), "the admin listener kept a head that never ends")
            }
        }
    }

    /// `GET /admin/openapi.yaml` lists exactly the admin router's routes, with and without the
    /// webhook routes (the service API's, under /admin/v1).
    @Test(arguments: [false, true])
    func theAdminDocumentListsExactlyTheRoutesServed(withWebhooks: Bool) async throws {
        try await StoreHarness.with(.sqlite) { harness in
            let authority = await TokenAuthority(secret: HTTPHarness.secret)
            let webhooks = withWebhooks ? StoreWebhookAdministration(store: harness.store, allowPrivate: true) : nil
            let router = try buildAdminRouter(store: harness.store, authority: authority, configuration: HTTPHarness.testConfiguration, webhooks: webhooks)
            // The console's pages are HTML for a browser, not part of the API (docs/admin.md#the-console).
            let served = RouterTests.served(router).filter { !$0.contains(" /admin/console") }
            try await Application(router: router).test(.router) { client in
                let response = try await client.executeRequest(uri: "/admin/openapi.yaml", method: .get, headers: [:], body: nil)
                #expect(response.status == .ok)
                let document = try #require(try Yams.load(yaml: String(buffer: response.body)) as? [String: Any])
                let documented = try RouterTests.documented(try #require(document["paths"] as? [String: Any]))
                #expect(served == documented, "served \(served.sorted()), documented \(documented.sorted())")
                #expect(served.contains("POST /admin/v1/webhooks/{}/pause") == withWebhooks)
            }
        }
    }
}

/// Requests to the admin listener of a `.live` server.
struct AdminClient {
    let port: Int

    func get(_ path: String, key: String?) async throws -> (status: Int, json: JSONValue?) {
        try await send(.get, path, key: key)
    }

    func send(_ method: HTTPRequest.Method, _ path: String, key: String?) async throws -> (status: Int, json: JSONValue?) {
        // A connection each: the listener under test closes idle ones after 2 s, and a pooled
        // connection taken as it closes is reset under the request.
        var headers: HTTPFields = [.connection: "close"]
        if let key { headers[.authorization] = "Bearer \(key)" }
        let response = try await PooledRequests(port: port).send(method, path, headers: headers, body: nil)
        return (response.status, try? JSONParser().parse(Array(response.body.readableBytesView)))
    }
}
