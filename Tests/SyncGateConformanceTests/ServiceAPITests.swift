import Foundation
import HTTPTypes
import Synchronization
import SyncGateCore
@testable import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import SyncGateWire
import SyncGateConcurrency
import Testing

/// Service keys and the service API: an app's own backend writes and reads a user's data
/// through the same pipeline as the user's devices, with a key of its own.
@Suite(.timeLimit(.minutes(10))) struct ServiceAPITests {
    /// A new key named `name` with `scopes`, stored; the key to send.
    static func key(_ name: String, _ scopes: Set<ServiceScope>, in store: SyncStore) async throws -> String {
        let (key, stored) = ServiceKeySecret.new(name: name, scopes: scopes)
        #expect(try await store.createServiceKey(stored))
        return key
    }

    static func serviceHeaders(_ key: String) -> HTTPFields {
        [.authorization: "Bearer \(key)", .contentType: "application/json"]
    }

    static func body(user: String?, _ operations: [SyncOperation]) -> String {
        var body: JSONObject = ["operations": .array(operations.map(\.json))]
        if let user { body["user_id"] = .string(user) }
        return JSONValue.object(body).serialized()
    }

    @Test(arguments: Driver.selected)
    func keysAreStoredHashedListedAndRevoked(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let store = harness.store
            let (key, stored) = ServiceKeySecret.new(name: "billing", scopes: [.write, .read])
            #expect(key.hasPrefix("sgk_") && key.utf8.count == 47)
            #expect(try await store.createServiceKey(stored))
            // A name is taken once, whatever the key.
            #expect(try await !store.createServiceKey(ServiceKeySecret.new(name: "billing", scopes: [.read]).stored))

            // Only the hash is stored.
            let hashes = try await harness.queryTexts("SELECT key_hash FROM service_keys")
            #expect(hashes == [ServiceKeySecret.hash(key)])
            #expect(hashes.allSatisfy { !$0.contains(key) && $0.utf8.count == 64 })

            let listed = try await store.serviceKeys()
            #expect(listed.map(\.name) == ["billing"])
            #expect(listed.first?.scopes == [.read, .write])
            #expect(listed.first?.hint == String(key.suffix(4)))
            #expect(listed.first?.revokedAt == nil)
            #expect(try await store.serviceKey(hash: ServiceKeySecret.hash(key))?.name == "billing")
            #expect(try await store.serviceKey(hash: ServiceKeySecret.hash(key + "x")) == nil)

            #expect(try await store.revokeServiceKey(name: "billing"))
            #expect(try await !store.revokeServiceKey(name: "billing"))
            #expect(try await !store.revokeServiceKey(name: "nobody"))
            #expect(try await store.serviceKey(hash: ServiceKeySecret.hash(key))?.revokedAt != nil)
            // A revoked key keeps its name.
            #expect(try await !store.createServiceKey(ServiceKeySecret.new(name: "billing", scopes: [.read]).stored))
        }
    }

    /// A key with a reach acts only for its users and its households (as their owner): every
    /// other user or household is `403` on every route, and nothing is queued for them.
    @Test(arguments: Driver.selected)
    func aKeyWithAReachActsOnlyForIt(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let store = http.store.store
            _ = try await http.results([Op.create("households", "home", ["name": "Home"]), Op.create("households", "cabin", ["name": "Cabin"])])
            let (kiosk, stored) = ServiceKeySecret.new(name: "kiosk", scopes: [.write, .read], reach: ServiceReach(users: ["bob"], households: ["home"]))
            #expect(try await store.createServiceKey(stored))
            let everyone = try await Self.key("billing", [.write, .read], in: store)
            let headers = Self.serviceHeaders(kiosk)
            func push(_ body: JSONObject, key: String = kiosk) async throws -> (status: Int, json: JSONValue?, headers: HTTPFields) {
                try await http.send(.post, "/v1/service/push?wait=30000", headers: Self.serviceHeaders(key), body: JSONValue.object(body).serialized())
            }
            let meal = Op.create("weightLogs", "w1", ["kg": 70]).json

            // Its user and its household: applied, and it follows both jobs (the household's is its owner's).
            let forBob = try await push(["user_id": "bob", "operations": [meal]])
            #expect(forBob.status == 200, "\(String(describing: forBob.json))")
            let intoHome = try await push(["household_id": "home", "operations": [Op.create("inventory", "milk", ["qty": 1]).json]])
            #expect(intoHome.json?["results"]?[0]?["status"] == "applied", "\(String(describing: intoHome.json))")
            let all = try await store.listJobs(JobFilter(limit: 10))
            let jobs = all.filter { $0.deviceID == "service:kiosk" }
            #expect(jobs.count == 2)
            for job in jobs {
                #expect(try await http.send(.get, "/v1/service/jobs/\(job.id)?user_id=\(job.userID)", headers: headers).status == 200)
            }
            // The owner's own jobs are not its to follow: their conflict answers carry her documents.
            let owners = all.filter { $0.userID == "alice" && $0.deviceID != "service:kiosk" }
            #expect(!owners.isEmpty)
            for job in owners {
                #expect(try await http.send(.get, "/v1/service/jobs/\(job.id)?user_id=alice", headers: headers).status == 404)
            }
            #expect(try await http.send(.get, "/v1/service/pull?user_id=bob", headers: headers).status == 200)
            #expect(try await http.send(.get, "/v1/service/entity?household_id=home&entity_type=inventory&entity_id=milk", headers: headers).status == 200)
            #expect(try await http.send(.get, "/v1/service/data?household_id=home", headers: headers).status == 200)

            // Anyone else: 403 on every route, nothing queued.
            for body: JSONObject in [["user_id": "alice", "operations": [meal]], ["household_id": "cabin", "operations": [meal]]] {
                let refused = try await push(body)
                #expect(refused.status == 403 && refused.json?.errorCode == "PERMISSION_DENIED", "\(String(describing: refused.json))")
            }
            #expect(try await store.listJobs(JobFilter(limit: 10)).count == all.count)
            for path in [
                "/v1/service/pull?user_id=alice", "/v1/service/data?user_id=alice", "/v1/service/data?household_id=cabin",
                "/v1/service/entity?household_id=cabin&entity_type=households&entity_id=cabin", "/v1/service/jobs/\(jobs[0].id)?user_id=carol",
            ] {
                #expect(try await http.send(.get, path, headers: headers).status == 403, "\(path)")
            }
            // A key without a reach acts for everyone.
            #expect(try await push(["user_id": "alice", "operations": [meal]], key: everyone).status == 200)

            // Listed with its reach; stored so that a release before the reach grants it nothing.
            let listed = try await store.serviceKeys().first { $0.name == "kiosk" }
            #expect(listed?.reach == ServiceReach(users: ["bob"], households: ["home"]) && listed?.scopes == [.read, .write])
            #expect(try await http.store.queryTexts("SELECT scopes FROM service_keys WHERE name = 'kiosk'") == ["read@reach,write@reach"])
            #expect(try await store.serviceKeys().first { $0.name == "billing" }?.reach == nil)
        }
    }

    /// The household of a household push is matched by bytes: an operation naming another
    /// spelling of it names another household, which the key's reach need not include.
    @Test func aHouseholdPushTakesOnlyItsOwnHousehold() throws {
        let item = Op.create("inventory", "milk", ["qty": 1], household: "cafe\u{301}")
        #expect(throws: ProtocolError.self) { try ServiceRoutes.intoHousehold("caf\u{E9}", [item]) }
        #expect(try ServiceRoutes.intoHousehold("cafe\u{301}", [item]).map(\.householdID) == ["cafe\u{301}"])
        #expect(try ServiceRoutes.intoHousehold("caf\u{E9}", [Op.create("inventory", "milk", ["qty": 1])]).map(\.householdID) == ["caf\u{E9}"])
    }

    @Test func aReachIsRefusedWhereItCannotHold() {
        let bob = ServiceReach(users: ["bob"])
        #expect(NewServiceKey.refusal(scopes: [.write], reach: nil) == nil)
        #expect(NewServiceKey.refusal(scopes: [.write, .read], reach: bob) == nil)
        #expect(NewServiceKey.refusal(scopes: [.admin], reach: bob) != nil)
        #expect(NewServiceKey.refusal(scopes: [.write], reach: ServiceReach()) != nil)
        #expect(NewServiceKey.refusal(scopes: [.write], reach: ServiceReach(households: ["a:b"])) != nil)
        #expect(NewServiceKey.refusal(scopes: [.write], reach: ServiceReach(users: ["x\u{0}"])) != nil)
        #expect(NewServiceKey.refusal(scopes: [.write], reach: ServiceReach(users: Set((0...100).map { "u\($0)" }))) != nil)
        // Stored forms: a reach this release cannot read, or reached scopes without one, reach no one.
        #expect(ServiceKeyRecord(name: "k", hint: "h", storedScopes: "write@reach", storedReach: "not json", createdAt: .now(), revokedAt: nil).reach == ServiceReach())
        #expect(ServiceKeyRecord(name: "k", hint: "h", storedScopes: "write@reach", storedReach: nil, createdAt: .now(), revokedAt: nil).reach == ServiceReach())
        #expect(ServiceKeyRecord(name: "k", hint: "h", storedScopes: "write", storedReach: nil, createdAt: .now(), revokedAt: nil).reach == nil)
        #expect(ServiceScope.parse(stored: "read@reach,write@reach,admin@other") == [.read, .write])
        // Byte for byte: NFC "josé" does not reach NFD "josé".
        #expect(ServiceReach(users: ["jos\u{E9}"]).covers(.user("jos\u{E9}")) && !ServiceReach(users: ["jos\u{E9}"]).covers(.user("jose\u{301}")))
    }

    @Test(arguments: Driver.selected)
    func aServiceWritesForAUserThroughTheSamePipelineAsADevice(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let key = try await Self.key("nutrition", [.write, .read], in: http.store.store)
            // Alice's phone waits on a long-poll when the backend corrects her meal.
            let start = try await http.pullAll()
            let baseline = http.waiters
            async let woken = http.pull(query: "cursor=\(start.cursor)&wait=30000")
            try await http.waitForWaiters(1, beyond: baseline)

            let meal = Op.create("foodLogs", "fl_1", ["loggedDate": "2026-01-15", "mealType": "lunch", "items": [["id": "rice", "name": "Rice", "calories": 200]]], key: "svc-1")
            let pushed = try await http.send(.post, "/v1/service/push?wait=30000", headers: Self.serviceHeaders(key), body: Self.body(user: "alice", [meal]))
            #expect(pushed.status == 200, "\(String(describing: pushed.json))")
            #expect(pushed.json?["results"]?[0]?["status"] == "applied")

            // The live pull wakes with the change, and the derived summary follows.
            let live = try await woken
            #expect(live.status == 200)
            #expect(live.json?["changes"]?.arrayValue?.contains { $0["entity_id"] == "fl_1" } == true)
            let state = try await http.state()
            #expect(state["foodLogs/fl_1"]?["version"] == 1)
            #expect(state.keys.contains { $0.hasPrefix("dailySummaries/") })

            // The job is the user's, from the key's device; the same idempotency key applies once.
            let jobs = try await http.store.store.listJobs(JobFilter(userID: "alice", limit: 10))
            #expect(jobs.map(\.deviceID) == ["service:nutrition"])
            let again = try await http.send(.post, "/v1/service/push?wait=30000", headers: Self.serviceHeaders(key), body: Self.body(user: "alice", [meal]))
            #expect(again.json?["results"]?[0]?["status"] == "duplicate")
            #expect(try await http.state()["foodLogs/fl_1"]?["version"] == 1)

            // Each change it made, the derived summary too, is pulled with the service's origin;
            // a device's change has none.
            _ = try await http.results([Op.create("weightLogs", "w-phone", ["kg": 70])])
            let pulled = try await http.pullAll().changes
            let origins = Dictionary(pulled.map { change in
                ("\(change["entity_type"]?.stringValue ?? "")/\(change["entity_id"]?.stringValue ?? "")", change["origin"]?.stringValue ?? "none")
            }) { _, last in last }
            #expect(origins["foodLogs/fl_1"] == "service:nutrition")
            #expect(origins.filter { $0.key.hasPrefix("dailySummaries/") }.values.allSatisfy { $0 == "service:nutrition" })
            #expect(origins["weightLogs/w-phone"] == "none")
            let phoneChange = pulled.first { $0["entity_id"] == "w-phone" }
            #expect(phoneChange != nil && phoneChange?["origin"] == nil, "a device's change has no origin member")
        }
    }

    @Test(arguments: Driver.selected)
    func aServiceFollowsItsJobAndReadsWhatTheUserReads(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let key = try await Self.key("dashboard", [.write, .read], in: http.store.store)
            // Alice shares a household with Bob.
            _ = try await http.results([
                Op.create("households", "home", ["name": "Home"]),
                Op.create("household_members", "home:bob", ["user_id": "bob", "role": "member"]),
            ])

            // A user id with characters a URL must escape survives the status URL's round trip.
            let odd = "a b/ü+&%=?#"
            let oddPush = try await http.send(.post, "/v1/service/push?wait=0", headers: Self.serviceHeaders(key), body: Self.body(user: odd, [Op.create("weightLogs", "w1", ["kg": 70])]))
            #expect(oddPush.status == 202)
            let oddLocation = try #require(oddPush.headers[.location])
            #expect(oddLocation.hasSuffix("?user_id=a%20b%2F%C3%BC%2B%26%25%3D%3F%23"), "\(oddLocation)")
            let oddDone = try await http.send(.get, oddLocation + "&wait=30000", headers: Self.serviceHeaders(key))
            #expect(oddDone.status == 200 && oddDone.json?["status"] == "done", "\(String(describing: oddDone.json))")
            #expect(try await http.state(user: odd)["weightLogs/w1"]?["data"] == ["kg": 70])

            // Without waiting: 202 and the job's service status URL, which the service follows.
            let item = Op.create("inventory", "milk", ["qty": 1], household: "home")
            let accepted = try await http.send(.post, "/v1/service/push?wait=0", headers: Self.serviceHeaders(key), body: Self.body(user: "bob", [item]))
            #expect(accepted.status == 202, "\(String(describing: accepted.json))")
            let location = try #require(accepted.headers[.location])
            #expect(location.hasPrefix("/v1/service/jobs/") && location.hasSuffix("?user_id=bob"))
            #expect(accepted.json?["status_url"]?.stringValue == location)
            let finished = try await http.send(.get, location + "&wait=30000", headers: Self.serviceHeaders(key))
            #expect(finished.status == 200)
            #expect(finished.json?["status"] == "done")
            #expect(finished.json?["results"]?[0]?["status"] == "applied")
            // Another user's job is not found.
            let jobID = try #require(location.split(separator: "?").first?.split(separator: "/").last)
            let other = try await http.send(.get, "/v1/service/jobs/\(jobID)?user_id=alice", headers: Self.serviceHeaders(key))
            #expect(other.status == 404)

            // The service reads what Alice reads: her feed and the household's, by cursor.
            let page = try await http.send(.get, "/v1/service/pull?user_id=alice&limit=1000", headers: Self.serviceHeaders(key))
            #expect(page.status == 200)
            let ids = Set(page.json?["changes"]?.arrayValue?.compactMap { $0["entity_id"]?.stringValue } ?? [])
            #expect(ids.isSuperset(of: ["home", "home:bob", "milk"]))
            // Alice's device, a member, pulls what the service wrote for Bob with its origin.
            let milk = try await http.pullAll().changes.first { $0["entity_id"] == "milk" }
            #expect(milk?["origin"] == "service:dashboard" && milk?["household_id"] == "home")
            let cursor = try #require(page.json?["cursor"]?.stringValue)
            let next = try await http.send(.get, "/v1/service/pull?user_id=alice&cursor=\(cursor)", headers: Self.serviceHeaders(key))
            #expect(next.status == 200)
            #expect(next.json?["changes"] == [])
            // A cursor is the user's: another user's cursor is refused.
            let crossed = try await http.send(.get, "/v1/service/pull?user_id=bob&cursor=\(cursor)", headers: Self.serviceHeaders(key))
            #expect(crossed.status == 409)
        }
    }

    /// A backend that knows a household and none of its members (a web dashboard) pushes into
    /// it: every operation lands there, as a job of the owner; members pull it with its origin.
    @Test(arguments: Driver.selected)
    func aServicePushesIntoAHouseholdWithoutNamingAMember(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let key = try await Self.key("pantry-web", [.write], in: http.store.store)
            let headers = Self.serviceHeaders(key)
            _ = try await http.results([
                Op.create("households", "home", ["name": "Home"]),
                Op.create("household_members", "home:bob", ["user_id": "bob", "role": "member"]),
            ])
            func push(_ body: JSONObject) async throws -> (status: Int, json: JSONValue?, headers: HTTPFields) {
                try await http.send(.post, "/v1/service/push?wait=30000", headers: headers, body: JSONValue.object(body).serialized())
            }
            func jobs() async throws -> Int { try await http.store.store.listJobs(JobFilter(limit: 100)).count }

            // Operations without a household_id, or naming this one, go into it.
            let milk = Op.create("inventory", "milk", ["qty": 1])
            let eggs = Op.create("inventory", "eggs", ["qty": 6], household: "home")
            let pushed = try await push(["household_id": "home", "operations": [milk.json, eggs.json]])
            #expect(pushed.status == 200, "\(String(describing: pushed.json))")
            #expect(pushed.json?["results"]?.arrayValue?.map { $0["status"] } == ["applied", "applied"])
            // The owner's job, from the key's device.
            let owned = try await http.store.store.listJobs(JobFilter(userID: "alice", limit: 10))
            #expect(owned.first?.deviceID == "service:pantry-web")
            // Bob, a member, pulls both with the service's origin.
            let pulled = try await http.pullAll(user: "bob", device: "bob-phone").changes.filter { $0["entity_type"] == "inventory" }
            #expect(Set(pulled.compactMap { $0["entity_id"]?.stringValue }) == ["milk", "eggs"])
            #expect(pulled.allSatisfy { $0["household_id"] == "home" && $0["origin"] == "service:pantry-web" })

            // A user-scoped type cannot be written through a household: refused for that
            // operation alone, never into the owner's own data.
            let mixed = try await push(["household_id": "home", "operations": [Op.create("weightLogs", "w1", ["kg": 70]).json, Op.create("inventory", "tea", ["qty": 2]).json]])
            #expect(mixed.json?["results"]?.arrayValue?.map { $0["status"] } == ["rejected", "applied"], "\(String(describing: mixed.json))")
            #expect(try await http.state()["weightLogs/w1"] == nil)

            // Bad requests are 400 or 404 and queue nothing.
            let before = try await jobs()
            let elsewhere = try await push(["household_id": "home", "operations": [Op.create("inventory", "x", ["qty": 1], household: "cabin").json]])
            #expect(elsewhere.status == 400 && elsewhere.json?["error"]?["code"] == "VALIDATION_ERROR")
            let both = try await push(["household_id": "home", "user_id": "alice", "operations": [milk.json]])
            #expect(both.status == 400)
            let neither = try await push(["operations": [milk.json]])
            #expect(neither.status == 400)
            let malformed = try await push(["household_id": "a:b", "operations": [milk.json]])
            #expect(malformed.status == 400)
            let unknown = try await push(["household_id": "nowhere", "operations": [milk.json]])
            #expect(unknown.status == 404 && unknown.json?["error"]?["code"] == "ENTITY_NOT_FOUND")
            #expect(try await jobs() == before)

            // An archived household takes no more household pushes.
            _ = try await http.results([Op.delete("households", "home", base: 1, household: "home")])
            let archived = try await push(["household_id": "home", "operations": [milk.json]])
            #expect(archived.status == 404)
        }
    }

    @Test(arguments: Driver.selected)
    func aServiceReadsAnEntityAndAScopesCurrentData(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            let key = try await Self.key("reports", [.read], in: http.store.store)
            let headers = Self.serviceHeaders(key)
            _ = try await http.results([
                Op.create("weightLogs", "w1", ["kg": 70]), Op.create("weightLogs", "w2", ["kg": 71]), Op.create("weightLogs", "w3", ["kg": 72]),
                Op.create("weightLogs", "w4", ["kg": 73]), Op.create("households", "home", ["name": "Home"]),
                Op.create("inventory", "milk", ["qty": 1], household: "home"), Op.create("inventory", "eggs", ["qty": 6], household: "home"),
            ])
            _ = try await http.results([Op.delete("weightLogs", "w4", base: 1)])

            // One entity, live or deleted, in a pulled change's shape.
            let w2 = try await http.send(.get, "/v1/service/entity?user_id=alice&entity_type=weightLogs&entity_id=w2", headers: headers)
            #expect(w2.status == 200)
            #expect(w2.json?["data"] == ["kg": 71])
            #expect(w2.json?["version"] == 1)
            #expect(w2.json?["operation"] == "upsert")
            #expect(w2.json?["household_id"] == .null)
            let w4 = try await http.send(.get, "/v1/service/entity?user_id=alice&entity_type=weightLogs&entity_id=w4", headers: headers)
            #expect(w4.json?["operation"] == "delete")
            #expect(w4.json?["data"] == .null)
            #expect(w4.json?["version"] == 2)
            let milk = try await http.send(.get, "/v1/service/entity?household_id=home&entity_type=inventory&entity_id=milk", headers: headers)
            #expect(milk.json?["household_id"] == "home")
            #expect(milk.json?["data"] == ["qty": 1])
            let missing = try await http.send(.get, "/v1/service/entity?user_id=bob&entity_type=weightLogs&entity_id=w2", headers: headers)
            #expect(missing.status == 404)
            #expect(missing.json?.errorCode == "ENTITY_NOT_FOUND")

            // A user's live entities, two at a time, in (type, id) order; the deleted one is not there.
            var seen: [String] = []
            var after: String?
            for _ in 0..<10 {
                let query = "user_id=alice&limit=2" + (after.map { "&after=\($0)" } ?? "")
                let page = try await http.send(.get, "/v1/service/data?\(query)", headers: headers)
                #expect(page.status == 200, "\(String(describing: page.json))")
                let entities = page.json?["entities"]?.arrayValue ?? []
                #expect(entities.count <= 2)
                seen += entities.map { "\($0["entity_type"]!.stringValue!)/\($0["entity_id"]!.stringValue!)" }
                guard page.json?["has_more"] == true else { break }
                after = page.json?["after"]?.stringValue
            }
            #expect(seen == seen.sorted())
            #expect(seen.filter { $0.hasPrefix("weightLogs/") } == ["weightLogs/w1", "weightLogs/w2", "weightLogs/w3"])
            #expect(!seen.contains { $0.hasPrefix("inventory/") })

            let weights = try await http.send(.get, "/v1/service/data?user_id=alice&entity_types=weightLogs", headers: headers)
            #expect(weights.json?["entities"]?.arrayValue?.compactMap { $0["entity_id"]?.stringValue } == ["w1", "w2", "w3"])
            #expect(weights.json?["has_more"] == false)
            let household = try await http.send(.get, "/v1/service/data?household_id=home", headers: headers)
            let ids = household.json?["entities"]?.arrayValue?.compactMap { $0["entity_id"]?.stringValue }
            #expect(ids == ["home:alice", "home", "eggs", "milk"])

            // Bad requests change nothing and say why.
            #expect(try await http.send(.get, "/v1/service/data?user_id=alice&household_id=home", headers: headers).status == 400)
            #expect(try await http.send(.get, "/v1/service/data", headers: headers).status == 400)
            #expect(try await http.send(.get, "/v1/service/data?user_id=alice&after=%21%21", headers: headers).status == 400)
            // A NUL (PostgreSQL cannot hold one in text) is a 400 on every driver, not a 500.
            let nul = "WyJhXHUwMDAwIiwiYiJd"  // base64url of ["a\u0000","b"]
            #expect(try await http.send(.get, "/v1/service/data?user_id=alice&after=\(nul)", headers: headers).status == 400)
            #expect(try await http.send(.get, "/v1/service/data?user_id=alice&entity_types=%00", headers: headers).status == 400)
            #expect(try await http.pull(query: "entity_types=a%00b").status == 400)
            #expect(try await http.send(.get, "/v1/service/entity?user_id=alice&entity_type=weightLogs", headers: headers).status == 400)
            let writer = try await Self.key("writer-only", [.write], in: http.store.store)
            #expect(try await http.send(.get, "/v1/service/data?user_id=alice", headers: Self.serviceHeaders(writer)).status == 403)
        }
    }

    @Test(arguments: Driver.selected)
    func keysAndTokensAreRefusedWhereTheyDoNotBelong(_ driver: Driver) async throws {
        var configuration = HTTPHarness.testConfiguration
        configuration.serviceKeyCacheTime = .zero
        try await HTTPHarness.with(driver, configuration: configuration) { http in
            let store = http.store.store
            let writer = try await Self.key("writer", [.write], in: store)
            let reader = try await Self.key("reader", [.read], in: store)
            let meal = Op.create("weightLogs", "w1", ["kg": 70])
            let body = Self.body(user: "alice", [meal])

            // No key, a user's token, an unknown or malformed key: 401, and nothing queued.
            let none = try await http.send(.post, "/v1/service/push", headers: [.contentType: "application/json"], body: body)
            #expect(none.status == 401)
            #expect(none.headers[.wwwAuthenticate] != nil)
            let token = try await http.send(.post, "/v1/service/push", headers: try await http.headers(), body: body)
            #expect(token.status == 401)
            #expect(token.json?["error"]?["message"]?.stringValue?.contains("service key") == true)
            let unknown = try await http.send(.post, "/v1/service/push", headers: Self.serviceHeaders(ServiceKeySecret.generate()), body: body)
            #expect(unknown.status == 401)
            // A service key is not a user's token.
            var keyOnDeviceRoute = Self.serviceHeaders(writer)
            keyOnDeviceRoute[HTTPField.Name("X-Device-Id")!] = "d1"
            #expect(try await http.send(.get, "/v1/sync/pull", headers: keyOnDeviceRoute).status == 401)

            // Each scope grants only itself.
            let readerWrites = try await http.send(.post, "/v1/service/push", headers: Self.serviceHeaders(reader), body: body)
            #expect(readerWrites.status == 403)
            #expect(readerWrites.json?.errorCode == "PERMISSION_DENIED")
            #expect(try await http.send(.get, "/v1/service/pull?user_id=alice", headers: Self.serviceHeaders(writer)).status == 403)
            #expect(try await http.send(.get, "/v1/service/jobs/1?user_id=alice", headers: Self.serviceHeaders(reader)).status == 403)

            // A push without a user, or with a bad one: 400.
            let noUser = try await http.send(.post, "/v1/service/push", headers: Self.serviceHeaders(writer), body: Self.body(user: nil, [meal]))
            #expect(noUser.status == 400)
            let badUser = try await http.send(
                .post, "/v1/service/push", headers: Self.serviceHeaders(writer),
                body: JSONValue.object(["user_id": .int(7), "operations": .array([meal.json])]).serialized()
            )
            #expect(badUser.status == 400)
            #expect(try await store.listJobs(JobFilter(limit: 10)).isEmpty)

            // No device can claim a service's origin.
            let impostor = try await http.push([meal], device: "service:writer")
            #expect(impostor.status == 400)
            #expect(impostor.json?["error"]?["message"]?.stringValue?.contains("reserved for service keys") == true)
            // Nor the device of the erase's own jobs (a user could stall their erase with it).
            let eraser = try await http.push([meal], device: "syncgate-erase")
            #expect(eraser.status == 400, "\(String(describing: eraser.json))")

            // Revoked: refused (this front trusts a checked key for zero seconds).
            #expect(try await http.send(.get, "/v1/service/pull?user_id=alice", headers: Self.serviceHeaders(reader)).status == 200)
            #expect(try await store.revokeServiceKey(name: "reader"))
            let revoked = try await http.send(.get, "/v1/service/pull?user_id=alice", headers: Self.serviceHeaders(reader))
            #expect(revoked.status == 401)
            #expect(revoked.json?["error"]?["message"] == "this service key was revoked")
        }
    }

    @Test(arguments: Driver.selected)
    func noDialectDeviceCanClaimAServicesOrigin(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 0, server: DialectTests.mounted) { http in
            let body = JSONValue.object(["deviceId": "service:nutrition", "changes": []]).serialized()
            let response = try await http.send(.post, "/sync/push", headers: try await http.headers(device: nil), body: body)
            #expect(response.status == 400)
            #expect(response.json?["error"]?["message"]?.stringValue?.contains("reserved for service keys") == true, "\(String(describing: response.json))")
            #expect(try await http.store.store.listJobs(JobFilter(limit: 10)).isEmpty)
        }
    }

    /// Keys a front does not remember are looked up one at a time: concurrent requests with the
    /// same new key cost one lookup, and made-up keys queue behind each other instead of taking
    /// every connection of the front's pool.
    @Test(arguments: Driver.selected)
    func aFrontLooksUpANewKeyOnceHoweverManyRequestsBringIt(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let counting = CountingFrontStore(harness.store)
            // A clock that stands still: the remembered key never ages out, however slowly a
            // loaded machine runs the twenty requests (5 s of it did once, and one looked it up again).
            let instant = ContinuousClock.now
            let verifier = ServiceKeyVerifier(store: counting, now: { instant })
            let key = try await Self.key("billing", [.write], in: harness.store)
            let release = TestGate("the first lookup's answer")
            counting.holdKeyLookups(until: release)
            let requests = (0..<20).map { _ in Task { try await verifier.verify(key) } }
            let stranger = Task { try? await verifier.verify(ServiceKeySecret.generate()) }
            try await eventually("the first lookup under way") { counting.count("serviceKey") == 1 }
            // However long the first lookup takes, nothing else reaches the store meanwhile:
            // each of the others waits for its turn, which begins once the first has answered.
            #expect(counting.count("serviceKey") == 1)
            release.open()
            for request in requests { #expect(try await request.value.name == "billing") }
            #expect(await stranger.value == nil)
            // One lookup for the twenty, one for the made-up key.
            #expect(counting.count("serviceKey") == 2)
        }
    }

    /// A flood of made-up keys (each one a lookup) holds up no key the front knows: once its
    /// time ran out it is looked up again in a queue of its own. And the flood waits in a bounded
    /// queue: past it, 429 with Retry-After at once.
    @Test(arguments: Driver.selected)
    func aFloodOfMadeUpKeysHoldsUpNoKnownKey(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let counting = CountingFrontStore(harness.store)
            let clock = Mutex(ContinuousClock.now)
            let verifier = ServiceKeyVerifier(store: counting, cacheTime: .seconds(5)) { clock.withLock { $0 } }
            let key = try await Self.key("billing", [.write], in: harness.store)
            #expect(try await verifier.verify(key).name == "billing")
            clock.withLock { $0 += .seconds(6) }
            // Every made-up key's lookup hangs until the test says; the known key's does not.
            let release = TestGate("the made-up keys' lookups")
            counting.holdKeyLookups(until: release, except: ServiceKeySecret.hash(key))
            let outcomes = Locked<[String]>([])
            let flood = (0..<(ServiceKeyVerifier.maximumWaiting + 6)).map { _ in
                Task {
                    do {
                        _ = try await verifier.verify(ServiceKeySecret.generate())
                        outcomes.update { $0.append("accepted") }
                    } catch let error as ProtocolError {
                        outcomes.update { $0.append(error.code.rawValue) }
                    }
                }
            }
            try await eventually("the flood's queue full") { outcomes.value.contains("RATE_LIMITED") }
            #expect(try await verifier.verify(key).name == "billing", "the known key waited for the flood")
            release.open()
            for task in flood { try await task.value }
            let refused = outcomes.value.filter { $0 == "RATE_LIMITED" }.count
            #expect(refused >= 1 && refused + outcomes.value.filter { $0 == "UNAUTHENTICATED" }.count == flood.count, "\(outcomes.value)")
        }
    }

    @Test(arguments: Driver.selected)
    func aFrontTrustsACheckedKeyForItsCacheTimeOnly(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let counting = CountingFrontStore(harness.store)
            let clock = Mutex(ContinuousClock.now)
            let verifier = ServiceKeyVerifier(store: counting, cacheTime: .seconds(5), capacity: 2) { clock.withLock { $0 } }
            let key = try await Self.key("billing", [.write], in: harness.store)
            func lookups() -> Int { counting.count("serviceKey") }

            #expect(try await verifier.verify(key) == AuthenticatedService(name: "billing", scopes: [.write]))
            #expect(try await verifier.verify(key).name == "billing")
            #expect(lookups() == 1)

            // Revoked: still trusted until the cache time passes, then refused, and not remembered.
            #expect(try await harness.store.revokeServiceKey(name: "billing"))
            clock.withLock { $0 += .seconds(4) }
            #expect(try await verifier.verify(key).name == "billing")
            #expect(lookups() == 1)
            clock.withLock { $0 += .seconds(2) }
            await #expect(throws: ProtocolError.self) { try await verifier.verify(key) }
            await #expect(throws: ProtocolError.self) { try await verifier.verify(key) }
            #expect(lookups() == 3)

            // A user's token or garbage never reaches the store.
            await #expect(throws: ProtocolError.self) { try await verifier.verify("eyJhbGciOiJIUzI1NiJ9.e30.x") }
            #expect(lookups() == 3)

            // At most `capacity` (2) keys are remembered: a full cache first drops the expired ones…
            let a = try await Self.key("a", [.read], in: harness.store)
            let b = try await Self.key("b", [.read], in: harness.store)
            let c = try await Self.key("c", [.read], in: harness.store)
            _ = try await verifier.verify(a)
            clock.withLock { $0 += .seconds(3) }
            _ = try await verifier.verify(b)
            clock.withLock { $0 += .seconds(3) }  // a expired, b has 2 s left
            _ = try await verifier.verify(c)
            #expect(lookups() == 6)
            _ = try await verifier.verify(b)
            _ = try await verifier.verify(c)
            #expect(lookups() == 6)
            // … and, when none expired, everything: b and c are looked up again.
            _ = try await verifier.verify(a)
            #expect(lookups() == 7)
            _ = try await verifier.verify(b)
            _ = try await verifier.verify(c)
            #expect(lookups() == 9)
        }
    }
}
