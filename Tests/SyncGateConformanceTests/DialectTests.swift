import Foundation
import HTTPTypes
import SyncGateCore
import SyncGateWire
import SyncGateDialects
import SyncGateHTTP
import SyncGateServer
import SyncGateTestSupport
import Testing

/// The seed apps' dialects end to end (`../shared/DIALECTS.md`), on both drivers: their request
/// and response shapes, through the same pipeline as /v1.
@Suite(.timeLimit(.minutes(10))) struct DialectTests {
    /// Both dialects mounted, as the README's seed-app section configures them.
    static let mounted: @Sendable (inout ServerConfiguration) -> Void = { $0.dialects = Set(Dialect.allCases) }

    /// A new deployment serves `/v1` only: the dialects' routes are unknown until configured, and
    /// each dialect mounts only its own (`/sync/full` is both apps').
    @Test(arguments: Driver.selected)
    func theDialectsAreMountedOnlyWhenConfigured(_ driver: Driver) async throws {
        let routes: [(HTTPRequest.Method, String, Set<Dialect>)] = [
            (.post, "/sync/push", [.dietTracker]), (.get, "/sync/pull", [.dietTracker]),
            (.get, "/sync/full", [.dietTracker, .pantryPal]), (.post, "/sync/full", [.dietTracker, .pantryPal]),
            (.get, "/api/sync/changes?household_id=h", [.pantryPal]),
        ]
        for dialects in [[], [.dietTracker], [.pantryPal]] as [Set<Dialect>] {
            try await HTTPHarness.with(driver, workers: 0, server: { $0.dialects = dialects }) { http in
                for (method, path, servedBy) in routes {
                    let response = try await http.send(method, path, headers: try await http.headers(device: nil), body: method == .post ? "{}" : nil)
                    if servedBy.isDisjoint(with: dialects) {
                        #expect(response.status == 404 && response.json?.errorCode == "NOT_FOUND", "\(dialects) \(method) \(path)")
                    } else {
                        #expect(response.status != 404 && response.status != 405, "\(dialects) \(method) \(path): \(response.status)")
                    }
                }
            }
        }
        // Mounted, their paths answer other methods with 405 and Allow, like /v1's.
        try await HTTPHarness.with(driver, workers: 0, server: Self.mounted) { http in
            for (method, path, allowed) in [(HTTPRequest.Method.put, "/sync/full", "GET, HEAD, POST"), (.post, "/api/sync/changes", "GET, HEAD"), (.get, "/sync/push", "POST")] {
                let response = try await http.send(method, path, headers: try await http.headers(device: nil))
                #expect(response.status == 405 && response.json?.errorCode == "METHOD_NOT_ALLOWED", "\(method) \(path)")
                #expect(response.headers[.allow] == allowed, "\(method) \(path)")
            }
        }
    }

    static func change(_ collection: String, _ operation: String, _ id: String, version: Int64 = 0, data: JSONValue? = nil, at time: String, household: String? = nil) -> JSONValue {
        var change: JSONObject = [
            "collection": .string(collection), "operation": .string(operation), "documentId": .string(id), "version": .int(version),
            "timestamp": .string(time),
        ]
        if let data { change["data"] = data }
        if let household { change["householdId"] = .string(household) }
        return .object(change)
    }

    static func pushBody(_ changes: [JSONValue], device: String? = "phone") -> String {
        var body: JSONObject = ["lastPulledAt": "2025-01-01T00:00:00.000Z", "changes": .array(changes)]
        if let device { body["deviceId"] = .string(device) }
        return JSONValue.object(body).serialized()
    }

    static func dietPush(_ http: HTTPHarness, _ changes: [JSONValue], user: String = "alice") async throws -> JSONValue {
        let response = try await http.send(.post, "/sync/push", headers: try await http.headers(user, device: nil), body: pushBody(changes))
        guard response.status == 200, let json = response.json else {
            throw TestEnvironmentError(description: "push answered \(response.status): \(String(describing: response.json))")
        }
        return json
    }

    static func get(_ http: HTTPHarness, _ uri: String, user: String = "alice") async throws -> (status: Int, json: JSONValue) {
        let response = try await http.send(.get, uri, headers: try await http.headers(user, device: nil))
        return (response.status, response.json ?? .null)
    }

    static func escaped(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text
    }

    @Test(arguments: Driver.selected)
    func dietTrackerPushesConflictsPullsAndSyncsInFull(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, server: Self.mounted) { http in
            let pushed = try await Self.dietPush(http, [
                Self.change("weightLogs", "create", "w1", data: ["kg": 80], at: "2026-01-15T08:00:00.000Z"),
                Self.change("foodLogs", "create", "f1", data: ["loggedDate": "2026-01-15", "mealType": "lunch", "items": [["id": "a", "calories": 500]]], at: "2026-01-15T12:00:00.000Z"),
                Self.change("families", "create", "fam", data: ["name": "Family"], at: "2026-01-15T12:00:00.000Z"),
            ])
            #expect(pushed["success"] == true)
            #expect(pushed["applied"] == ["w1", "f1", "fam"])
            #expect(pushed["conflicts"] == [])
            #expect(pushed["serverTime"]?.stringValue.flatMap(Timestamp.init(rfc3339:)) != nil)

            // Bootstrap: everything, the server-derived daily summary and the family included.
            let first = try await Self.get(http, "/sync/pull")
            #expect(first.status == 200 && first.json["hasMore"] == false)
            let firstChanges = first.json["changes"]?.arrayValue ?? []
            #expect(Set(firstChanges.compactMap { $0["collection"]?.stringValue }) == ["weightLogs", "foodLogs", "dailySummaries", "families", "familyMembers"])
            let weight = firstChanges.first { $0["documentId"] == "w1" }
            #expect(weight == ["collection": "weightLogs", "documentId": "w1", "operation": "upsert", "data": ["kg": 80], "version": 1, "updatedAt": weight?["updatedAt"] ?? .null])
            #expect(firstChanges.first { $0["collection"] == "dailySummaries" }?["data"]?["calories"] == 500)
            let since = try #require(first.json["serverTime"]?.stringValue)

            // Conflicts, as the original server had them: a stale update with an older timestamp
            // loses to the server; an update of a missing document; a create of a read-only type.
            let conflicting = try await Self.dietPush(http, [
                Self.change("weightLogs", "update", "w1", version: 1, data: ["kg": 79], at: "2026-01-15T09:00:00.000Z"),
                Self.change("weightLogs", "update", "w1", version: 1, data: ["kg": 90], at: "2026-01-15T07:00:00.000Z"),
                Self.change("weightLogs", "delete", "missing", version: 3, at: "2026-01-15T09:00:00.000Z"),
                Self.change("dailySummaries", "create", "2026-01-15", data: ["calories": 1], at: "2026-01-15T09:00:00.000Z"),
            ])
            #expect(conflicting["applied"] == ["w1"])
            #expect(conflicting["conflicts"] == [
                ["documentId": "w1", "clientVersion": 1, "serverVersion": 2, "serverData": ["kg": 79], "resolution": "server_wins"],
                ["documentId": "missing", "clientVersion": 3, "serverVersion": 0, "serverData": .null, "resolution": "server_wins"],
            ])
            #expect(conflicting["success"] == false)
            #expect(conflicting["rejected"]?[0]?["code"] == "PERMISSION_DENIED")

            // The pull from the last serverTime brings exactly the one new version.
            let next = try await Self.get(http, "/sync/pull?since=\(Self.escaped(since))&collections=weightLogs,dailySummaries")
            #expect(next.json["changes"]?.arrayValue?.map { $0["documentId"] } == ["w1"])
            #expect(next.json["changes"]?[0]?["version"] == 2)
            let later = try #require(next.json["serverTime"]?.stringValue)
            #expect(try await Self.get(http, "/sync/pull?since=\(Self.escaped(later))").json["changes"] == [])

            // A deletion arrives as one.
            _ = try await Self.dietPush(http, [Self.change("weightLogs", "delete", "w1", version: 2, at: "2026-01-15T10:00:00.000Z")])
            let deleted = try await Self.get(http, "/sync/pull?since=\(Self.escaped(later))")
            #expect(deleted.json["changes"]?[0]?["operation"] == "delete")
            #expect(deleted.json["changes"]?[0]?["data"] == .null)

            // Full sync: every live document by collection (the deleted one is gone).
            for method in [HTTPRequest.Method.post, .get] {
                let full = try await http.send(method, "/sync/full", headers: try await http.headers(device: nil))
                #expect(full.status == 200)
                let data = try #require(full.json?["data"]?.objectValue)
                #expect(Set(data.keys) == ["foodLogs", "dailySummaries", "families", "familyMembers"])
                #expect(data["families"]?[0]?["documentId"] == "fam")
                #expect(data["foodLogs"]?[0]?["version"] == 1)
                #expect(full.json?["serverTime"]?.stringValue != nil)
            }
        }
    }

    /// A household's documents arrive in diet-tracker pulls and full syncs with their household,
    /// which a push of them needs: two households' documents of the same id stay apart, and one
    /// pushed back as it was pulled applies to its own household.
    @Test(arguments: Driver.selected)
    func dietReadsNameTheHouseholdOfAHouseholdsDocuments(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, server: Self.mounted) { http in
            for home in ["h1", "h2"] {
                _ = try await http.results([
                    Op.create("households", home, ["name": .string(home)]),
                    Op.create("household_members", "\(home):bob", ["user_id": "bob", "role": "member"]),
                    Op.create("inventory", "abc", ["quantity": home == "h1" ? 1 : 2], household: home),
                ])
            }
            let pulled = try await Self.get(http, "/sync/pull", user: "bob")
            let inventory = (pulled.json["changes"]?.arrayValue ?? []).filter { $0["collection"] == "inventory" }
            #expect(Set(inventory.map { "\($0["householdId"]?.stringValue ?? "-")=\($0["data"]?["quantity"]?.intValue ?? 0)" }) == ["h1=1", "h2=2"])
            // Families and their members carry their household in their ids, not beside them.
            #expect((pulled.json["changes"]?.arrayValue ?? []).filter { $0["collection"] == "families" || $0["collection"] == "familyMembers" }.allSatisfy { $0["householdId"] == nil })

            let full = try await Self.get(http, "/sync/full", user: "bob")
            let documents = full.json["data"]?["inventory"]?.arrayValue ?? []
            #expect(Set(documents.map { "\($0["householdId"]?.stringValue ?? "-")=\($0["data"]?["quantity"]?.intValue ?? 0)" }) == ["h1=1", "h2=2"])
            #expect(full.json["data"]?["families"]?.arrayValue?.allSatisfy { $0["householdId"] == nil } == true)

            let second = try #require(documents.first { $0["householdId"] == "h2" })
            let pushed = try await Self.dietPush(http, [
                Self.change("inventory", "update", "abc", version: 1, data: ["quantity": 3], at: "2026-01-15T08:00:00.000Z", household: second["householdId"]?.stringValue)
            ], user: "bob")
            #expect(pushed["applied"] == ["abc"] && pushed["conflicts"] == [] && pushed["success"] == true, "\(pushed)")
            let after = try await Self.get(http, "/sync/full?household_id=h2", user: "bob")
            #expect(after.json["data"]?["inventory"]?[0]?["data"]?["quantity"] == 3)
            #expect(try await Self.get(http, "/sync/full?household_id=h1", user: "bob").json["data"]?["inventory"]?[0]?["data"]?["quantity"] == 1)
        }
    }

    /// A client that pages by the answer's `cursor` and keeps its `since` reads every change
    /// once and stops; an empty `collections` reads every collection, as an absent one does.
    @Test(arguments: Driver.selected)
    func dietPullPagesByCursorAndReadsAnEmptyCollectionsAsAll(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, server: Self.mounted) { http in
            _ = try await Self.dietPush(http, (1...3).map { Self.change("weightLogs", "create", "w\($0)", data: ["kg": .int(Int64(70 + $0))], at: "2026-01-15T08:00:00.000Z") })
            var read: [String] = []
            var cursor: String?
            var pages = 0
            for _ in 0..<10 {
                pages += 1
                let page = try await Self.get(http, "/sync/pull?since=&limit=1" + (cursor.map { "&cursor=\(Self.escaped($0))" } ?? ""))
                #expect(page.status == 200, "\(page.json)")
                read += (page.json["changes"]?.arrayValue ?? []).compactMap { $0["documentId"]?.stringValue }
                guard page.json["hasMore"] == true else {
                    #expect(page.json["cursor"] == nil, "\(page.json)")
                    break
                }
                #expect(page.json["cursor"] == page.json["serverTime"], "\(page.json)")
                cursor = page.json["cursor"]?.stringValue
            }
            #expect(read == ["w1", "w2", "w3"] && pages > 1, "\(read) in \(pages) pages")
            let all = try await Self.get(http, "/sync/pull?collections=")
            #expect(all.status == 200 && all.json["changes"]?.arrayValue?.count == 3, "\(all.json)")
            #expect(try await Self.get(http, "/sync/pull?cursor=yesterday").status == 400)
            #expect(try await Self.get(http, "/sync/pull?collections=a%00b").status == 400)
        }
    }

    /// No idempotency keys: the client resends a push it got no answer to, unchanged. The resend
    /// applies nothing twice; a different change of the same document applies.
    @Test(arguments: Driver.selected)
    func aResentDietPushAppliesOnce(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, server: Self.mounted) { http in
            let create = Self.change("weightLogs", "create", "w", data: ["kg": 80], at: "2026-01-15T08:00:00.000Z")
            let update = Self.change("weightLogs", "update", "w", version: 1, data: ["kg": 81], at: "2026-01-15T09:00:00.000Z")
            #expect(try await Self.dietPush(http, [create, update])["applied"] == ["w", "w"])
            // The same body again, twice (answers lost on the way back).
            for _ in 0..<2 {
                let again = try await Self.dietPush(http, [create, update])
                #expect(again["applied"] == ["w", "w"] && again["conflicts"] == [])
            }
            let state = try await http.state()
            #expect(state["weightLogs/w"]?["version"] == 2)
            #expect(state["weightLogs/w"]?["data"] == ["kg": 81])
            // The same update with another timestamp is another change: it applies (version 3).
            let other = Self.change("weightLogs", "update", "w", version: 2, data: ["kg": 81], at: "2026-01-15T09:30:00.000Z")
            #expect(try await Self.dietPush(http, [other])["applied"] == ["w"])
            #expect(try await http.state()["weightLogs/w"]?["version"] == 3)
        }
    }

    /// A push no worker finishes in time answers 503 with Retry-After; it stays queued and
    /// applies, and the client's resend answers from it instead of applying again.
    @Test(arguments: Driver.selected)
    func aDietPushNotFinishedInTimeIsRetryableAndTheResendAppliesNothingTwice(_ driver: Driver) async throws {
        var configuration = HTTPHarness.testConfiguration
        // Long enough for a resend to be applied by a worker on a loaded machine (at 200 ms a full
        // parallel run saw twenty resends in a row answered 503), short for the first push.
        configuration.maximumPushWaitMilliseconds = 1000
        try await HTTPHarness.with(driver, configuration: configuration, workers: 0, server: Self.mounted) { http in
            let body = Self.pushBody([Self.change("weightLogs", "create", "w", data: ["kg": 80], at: "2026-01-15T08:00:00.000Z")])
            let first = try await http.send(.post, "/sync/push", headers: try await http.headers(device: nil), body: body)
            #expect(first.status == 503)
            #expect(first.json?.errorCode == "UNAVAILABLE" && first.json?["error"]?["retryable"] == true)
            #expect(first.headers[.retryAfter] != nil)
            // A worker runs the queued push; the resend is then answered from it.
            _ = try await http.store.drain()
            // As a client does: resend until answered. On a loaded machine the wait may pass again;
            // each such resend leaves one more job behind the user's earlier ones, so the test
            // empties the queue before the next try (as the client's Retry-After pause would),
            // or the backlog outgrows the wait and no resend is ever answered in time.
            let resend = try await http.store.withWorkers(1) { () -> JSONValue? in
                for _ in 0..<20 {
                    let response = try await http.send(.post, "/sync/push", headers: try await http.headers(device: nil), body: body)
                    if response.status == 200 { return response.json }
                    #expect(response.status == 503)
                    _ = try await http.store.drain()
                }
                return nil
            }
            #expect(resend?["applied"] == ["w"] && resend?["conflicts"] == [])
            let pulled = try await Self.get(http, "/sync/pull")
            #expect(pulled.json["changes"]?.arrayValue?.map { $0["version"] } == [1])
        }
    }

    @Test(arguments: Driver.selected)
    func dietPushRefusesItsShapeErrorsWithTheProtocolsCodes(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, server: Self.mounted) { http in
            let headers = try await http.headers(device: nil)
            let cases: [(String, String)] = [
                ("{", "malformed JSON"),
                ("{\"deviceId\": \"p\"}", "'changes'"),
                (Self.pushBody([["collection": "weightLogs", "operation": "upsert", "documentId": "x", "version": 0, "data": [:]]]), "changes[0].operation"),
                (Self.pushBody([["collection": "weightLogs", "operation": "create", "documentId": "x", "version": -1, "data": [:]]]), "changes[0].version"),
                (Self.pushBody([["collection": "weightLogs", "operation": "create", "documentId": "x"]]), "changes[0].data"),
                (Self.pushBody([Self.change("weightLogs", "create", "x", data: [:], at: "yesterday")]), "changes[0].timestamp"),
                (Self.pushBody([Self.change("weightLogs", "create", "x", data: [:], at: "2026-01-15T08:00:00Z")], device: nil), "deviceId"),
            ]
            for (body, mention) in cases {
                let response = try await http.send(.post, "/sync/push", headers: headers, body: body)
                #expect(response.status == 400, "\(body)")
                #expect(response.json?.errorCode == "VALIDATION_ERROR")
                #expect(response.json?["error"]?["message"]?.stringValue?.contains(mention) == true, "\(String(describing: response.json)) should name \(mention)")
            }
            // The device id may come from the header instead.
            var withDevice = headers
            withDevice[HTTPField.Name("X-Device-Id")!] = "phone"
            let fromHeader = try await http.send(.post, "/sync/push", headers: withDevice, body: Self.pushBody([Self.change("weightLogs", "create", "x", data: [:], at: "2026-01-15T08:00:00Z")], device: nil))
            #expect(fromHeader.status == 200)
            // Unauthenticated: 401 with the protocol's body.
            let anonymous = try await http.send(.post, "/sync/push", headers: [.contentType: "application/json"], body: Self.pushBody([]))
            #expect(anonymous.status == 401 && anonymous.json?.errorCode == "UNAUTHENTICATED")
            #expect(try await Self.get(http, "/sync/pull?since=last-tuesday").status == 400)
        }
    }

    /// A household id is checked by its bytes: the member of NFC "café" is an outsider to NFD
    /// "café", another user's household the databases keep apart.
    @Test(arguments: Driver.selected)
    func aHouseholdIsReadOnlyByItsOwnMembersWhateverItsSpelling(_ driver: Driver) async throws {
        let nfc = "caf\u{E9}", nfd = "cafe\u{301}"
        try await HTTPHarness.with(driver, server: Self.mounted) { http in
            _ = try await http.results([Op.create("households", nfd, ["name": "Bob's"]), Op.create("inventory", "secret", ["quantity": 1], household: nfd)], user: "bob")
            _ = try await http.results([Op.create("households", nfc, ["name": "Mallory's"])], user: "mallory")
            #expect(try await Self.get(http, "/sync/full?household_id=\(Self.escaped(nfd))", user: "bob").status == 200)
            #expect(try await Self.get(http, "/sync/full?household_id=\(Self.escaped(nfd))", user: "mallory").status == 403)
            let since = Self.escaped(Timestamp(millisecondsSinceEpoch: 0).rfc3339)
            #expect(try await Self.get(http, "/api/sync/changes?since=\(since)&household_id=\(Self.escaped(nfd))", user: "mallory").status == 403)
        }
    }

    /// PantryPal: a household's changes with the document as a string, 403 for outsiders, and
    /// the fall-back to a full sync past 100 changes, whose serverTime then reads on exactly.
    @Test(arguments: Driver.selected)
    func pantryPalReadsAHouseholdIncrementallyAndFallsBackToAFullSync(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, server: Self.mounted) { http in
            _ = try await http.results([
                Op.create("households", "home", ["name": "Home"]),
                Op.create("household_members", "home:bob", ["user_id": "bob", "role": "member"]),
                Op.create("inventory", "abc123", ["quantity": 5, "locationId": "xyz"], household: "home"),
            ])
            // No cursor yet: the client bootstraps with a full sync of the household.
            let full = try await http.send(.get, "/sync/full?household_id=home", headers: try await http.headers("bob", device: nil))
            #expect(full.status == 200)
            #expect(full.json?["data"]?["inventory"]?[0]?["data"] == ["quantity": 5, "locationId": "xyz"])
            var cursor = try #require(full.json?["serverTime"]?.stringValue)

            _ = try await http.results([
                Op.update("inventory", "abc123", base: 1, ["quantity": 4], household: "home"),
                Op.create("inventory", "def456", ["quantity": 1], household: "home"),
                Op.delete("inventory", "def456", base: 1, household: "home"),
            ])
            let changes = try await Self.get(http, "/api/sync/changes?since=\(Self.escaped(cursor))&household_id=home", user: "bob")
            #expect(changes.status == 200)
            let list = try #require(changes.json["changes"]?.arrayValue)
            #expect(list.map { $0["action"] } == ["update", "delete"])
            #expect(list[0]["entity_type"] == "inventory" && list[0]["entity_id"] == "abc123")
            // The document as a JSON string, as the old server sent it.
            let payload = try #require(list[0]["payload"]?.stringValue)
            #expect(try JSONParser().parse(Array(payload.utf8)) == ["quantity": 4, "locationId": "xyz"])
            #expect(list[1]["payload"] == .null)
            #expect(list[0]["client_timestamp"]?.stringValue.flatMap(Timestamp.init(rfc3339:)) != nil)
            cursor = try #require(changes.json["serverTime"]?.stringValue)

            // Outsiders and malformed requests.
            #expect(try await Self.get(http, "/api/sync/changes?since=\(Self.escaped(cursor))&household_id=home", user: "mallory").status == 403)
            #expect(try await Self.get(http, "/api/sync/changes?since=\(Self.escaped(cursor))&household_id=home", user: "mallory").json.errorCode == "PERMISSION_DENIED")
            #expect(try await Self.get(http, "/sync/full?household_id=home", user: "mallory").status == 403)
            #expect(try await Self.get(http, "/api/sync/changes?since=\(Self.escaped(cursor))", user: "bob").status == 400)

            // 150 changes: the answer has more than 100, so the client syncs in full and resets
            // its cursor to that serverTime; a change after that arrives, none before it again.
            _ = try await http.results((0..<150).map { Op.create("inventory", "bulk\($0)", ["quantity": .int(Int64($0))], household: "home") })
            let many = try await Self.get(http, "/api/sync/changes?since=\(Self.escaped(cursor))&household_id=home", user: "bob")
            #expect((many.json["changes"]?.arrayValue?.count ?? 0) > 100)
            let fallback = try await http.send(.post, "/sync/full?household_id=home", headers: try await http.headers("bob", device: nil))
            #expect(fallback.json?["data"]?["inventory"]?.arrayValue?.count == 151)
            cursor = try #require(fallback.json?["serverTime"]?.stringValue)
            _ = try await http.results([Op.update("inventory", "bulk7", base: 1, ["quantity": 70], household: "home")], user: "bob")
            let after = try await Self.get(http, "/api/sync/changes?since=\(Self.escaped(cursor))&household_id=home", user: "bob")
            #expect(after.json["changes"]?.arrayValue?.map { $0["entity_id"] } == ["bulk7"])
        }
    }
}
