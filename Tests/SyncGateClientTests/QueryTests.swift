import Foundation
import GRDB
import Synchronization
import SyncGateTestSupport
import Testing

@testable import SyncGateClient

/// Queries: the SQL each condition makes (no database), and their results, indexes and
/// observations on a real SQLite file.
@Suite("Queries", .timeLimit(.minutes(10)))
struct QueryTests {
    @Test("each condition's SQL and arguments; fields are dotted names; arrays and objects are refused as values")
    func sql() throws {
        let query = EntityQuery("foodLogs", in: .household("home"))
            .filter(.equals("mealType", "lunch"))
            .filter(.between("totals.calories", 100, 500.5))
            .filter(.in("day", ["mon", "tue"]))
            .filter(.equals("note", .null))
            .filter(.notEquals("done", true))
            .filter(.contains("name", "rice"))
            .filter(.hasElement("tags", "vegan"))
            .sorted(by: "loggedDate", .descending)
            .limit(20)
        let sql = try QuerySQL(query)
        #expect(sql.sql == """
            SELECT * FROM local_entity WHERE entity_type = ? AND household_id = ? \
            AND json_extract(data, '$.mealType') = ? \
            AND json_extract(data, '$.totals.calories') BETWEEN ? AND ? \
            AND json_extract(data, '$.day') IN (?, ?) \
            AND json_extract(data, '$.note') IS NULL \
            AND json_extract(data, '$.done') IS NOT ? \
            AND json_type(data, '$.name') = 'text' AND instr(json_extract(data, '$.name'), ?) > 0 \
            AND json_type(data, '$.tags') = 'array' AND EXISTS (SELECT 1 FROM json_each(data, '$.tags') WHERE value = ?) \
            ORDER BY json_extract(data, '$.loggedDate') DESC, household_id DESC, entity_id DESC LIMIT ?
            """)
        #expect(sql.arguments == [
            .text("foodLogs"), .text("home"), .text("lunch"), .integer(100), .real(500.5), .text("mon"), .text("tue"), .integer(1),
            .text("rice"), .text("vegan"), .integer(20),
        ])
        #expect(try QuerySQL(EntityQuery("a", in: .personal)).sql == "SELECT * FROM local_entity WHERE entity_type = ? AND household_id = '' ORDER BY household_id, entity_id")
        #expect(try QuerySQL(EntityQuery("a").filter(.in("x", []))).sql.contains("AND 0 ORDER BY"))
        for field in ["", "a..b", "1a", "a-b", "a b", "a'b", "é", ".a", "a."] {
            #expect(throws: SyncGateClientError.self, "\(field)") { try QuerySQL(EntityQuery("a").filter(.equals(field, 1))) }
        }
        #expect(throws: SyncGateClientError.self) { try QuerySQL(EntityQuery("a").filter(.equals("x", ["y": 1]))) }
        #expect(throws: SyncGateClientError.self) { try QuerySQL(EntityQuery("a").filter(.in("x", [[1]]))) }
        // A comparison with null would match nothing: only equals and notEquals take it.
        for filter in [QueryFilter.in("x", [1, .null]), .hasElement("x", .null), .lessThan("x", .null), .between("x", .null, 1)] {
            #expect(throws: SyncGateClientError.self, "\(filter)") { try QuerySQL(EntityQuery("a").filter(filter)) }
        }
        #expect(try QuerySQL(EntityQuery("a").sorted(by: "x", .descending).sorted(by: "y")).sql.hasSuffix("ORDER BY json_extract(data, '$.x') DESC, json_extract(data, '$.y') ASC, household_id, entity_id"))
        #expect(throws: SyncGateClientError.self) { try QuerySQL(EntityQuery("a").limit(-1)) }
        #expect(throws: SyncGateClientError.self) { try QuerySQL.index(LocalIndex(type: "a", fields: [])) }
        let index = try QuerySQL.index(LocalIndex(type: "food\"Logs", fields: ["loggedDate", "totals.calories"]))
        #expect(index.name == "app_index:food\"Logs:loggedDate,totals.calories")
        #expect(index.sql == """
            CREATE INDEX IF NOT EXISTS "app_index:food""Logs:loggedDate,totals.calories" ON local_entity \
            (entity_type, json_extract(data, '$.loggedDate'), json_extract(data, '$.totals.calories'), household_id, entity_id)
            """)
    }

    static let foods: [(String, JSONObject)] = [
        ("apple", ["name": "Apple", "calories": 95, "tags": ["fruit", "vegan"], "meal": "snack"]),
        ("rice", ["name": "Rice bowl", "calories": 420.5, "tags": ["vegan"], "meal": "lunch"]),
        ("steak", ["name": "Steak", "calories": 700, "tags": ["meat"], "meal": "dinner", "note": "medium"]),
        ("soup", ["name": "Soup", "calories": 150, "meal": "lunch"]),
        ("tea", ["name": "Tea", "calories": 0, "meal": "snack", "done": true]),
    ]

    static func client(indexes: [LocalIndex] = [], path: String? = nil) throws -> SyncClient {
        let (client, _) = try scriptedClient(configure: { configuration in
            configuration.indexes = indexes
            if let path { configuration.databasePath = path }
        }) { _ in ScriptedTransport.emptyPage() }
        return client
    }

    static func ids(_ entities: [SyncEntity]) -> [String] { entities.map(\.entityID) }

    /// The declared indexes the client's database holds, by name.
    static func indexNames(_ client: SyncClient) async throws -> [String] {
        try await client.readDatabase { db in
            try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'app_index:%' ORDER BY name")
        }
    }

    /// SQLite's plan for a query, one step per line.
    static func plan(_ query: EntityQuery, on client: SyncClient) async throws -> String {
        let sql = try QuerySQL(query)
        return try await client.readDatabase { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql.sql, arguments: StatementArguments(sql.arguments.map(\.databaseValue)))
                .map { $0["detail"] as String }.joined(separator: "\n")
        }
    }

    @Test("filters, order and limit select what a filter over every entity selects")
    func results() async throws {
        let client = try Self.client()
        for (id, data) in Self.foods { try await client.write(type: "foods", id: id, data: data) }
        try await client.write(type: "foods", id: "bread", data: ["name": "Bread", "calories": 250], household: "home")
        try await client.write(type: "drinks", id: "water", data: ["name": "Water", "calories": 0])
        let foods = EntityQuery("foods")
        #expect(Self.ids(try await client.read(foods)) == ["apple", "rice", "soup", "steak", "tea", "bread"])
        #expect(Self.ids(try await client.read(EntityQuery("foods", in: .personal))).count == 5)
        #expect(Self.ids(try await client.read(EntityQuery("foods", in: .household("home")))) == ["bread"])
        #expect(Self.ids(try await client.read(foods.filter(.equals("meal", "lunch")))) == ["rice", "soup"])
        #expect(Self.ids(try await client.read(foods.filter(.greaterThan("calories", 150)).sorted(by: "calories"))) == ["bread", "rice", "steak"])
        #expect(Self.ids(try await client.read(foods.filter(.greaterThanOrEqual("calories", 150)).sorted(by: "calories", .descending))) == ["steak", "rice", "bread", "soup"])
        #expect(Self.ids(try await client.read(foods.filter(.lessThan("calories", 95)))) == ["tea"])
        #expect(Self.ids(try await client.read(foods.filter(.lessThanOrEqual("calories", 95)))) == ["apple", "tea"])
        #expect(Self.ids(try await client.read(foods.filter(.between("calories", 95, 420.5)).sorted(by: "calories"))) == ["apple", "soup", "bread", "rice"])
        #expect(Self.ids(try await client.read(foods.filter(.in("meal", ["dinner", "snack"])))) == ["apple", "steak", "tea"])
        #expect(Self.ids(try await client.read(foods.filter(.contains("name", "o")))) == ["rice", "soup"])
        #expect(Self.ids(try await client.read(foods.filter(.hasElement("tags", "vegan")))) == ["apple", "rice"])
        #expect(Self.ids(try await client.read(foods.filter(.equals("note", .null)).filter(.equals("meal", "lunch")))) == ["rice", "soup"])
        #expect(Self.ids(try await client.read(foods.filter(.notEquals("note", .null)))) == ["steak"])
        #expect(Self.ids(try await client.read(foods.filter(.equals("done", true)))) == ["tea"])
        #expect(Self.ids(try await client.read(foods.sorted(by: "meal").sorted(by: "calories", .descending).limit(3))) == ["bread", "steak", "rice"])
        #expect(try await client.read(foods.limit(0)).isEmpty)
        // A field that is not a string never contains text; one that is not an array holds no element.
        #expect(try await client.read(foods.filter(.contains("calories", "9"))).isEmpty)
        #expect(try await client.read(foods.filter(.hasElement("name", "Apple"))).isEmpty)
        // The local view: a pending delete is gone from queries at once.
        try await client.delete(type: "foods", id: "rice")
        #expect(Self.ids(try await client.read(foods.filter(.equals("meal", "lunch")))) == ["soup"])
    }

    @Test("a declared index serves the query; an index no longer declared is dropped when the client opens")
    func indexes() async throws {
        let path = try temporaryFolder("query") + "/device.sqlite"
        var client = try Self.client(indexes: [LocalIndex(type: "foods", fields: ["calories"])], path: path)
        for (id, data) in Self.foods { try await client.write(type: "foods", id: id, data: data) }
        let query = EntityQuery("foods").filter(.greaterThan("calories", 100)).sorted(by: "calories")
        let plan = try await Self.plan(query, on: client)
        #expect(plan.contains("app_index:foods:calories"), "\(plan)")
        #expect(!plan.contains("TEMP B-TREE"), "\(plan)")
        #expect(Self.ids(try await client.read(query)) == ["soup", "rice", "steak"])
        // Backwards too: the ties follow the last key's direction, so the index serves the whole order.
        let backwards = try await Self.plan(EntityQuery("foods").filter(.greaterThan("calories", 100)).sorted(by: "calories", .descending), on: client)
        #expect(backwards.contains("app_index:foods:calories") && !backwards.contains("TEMP B-TREE"), "\(backwards)")
        await client.close()

        client = try Self.client(indexes: [LocalIndex(type: "foods", fields: ["meal", "calories"])], path: path)
        let names = try await Self.indexNames(client)
        #expect(names == ["app_index:foods:meal,calories"])
        #expect(Self.ids(try await client.read(query)) == ["soup", "rice", "steak"])
        await client.close()
    }

    @Test("a first sync fills the store without the declared indexes and makes them at its end, also when it fails")
    func bootstrapRemakesIndexes() async throws {
        let indexNames = Mutex<[[String]]>([])
        let failSecondPage = Atomic<Bool>(true)
        let box = Mutex<SyncClient?>(nil)
        let (client, _) = try scriptedClient(configure: { $0.indexes = [LocalIndex(type: "foods", fields: ["calories"])] }) { request in
            let names = try await Self.indexNames(box.withLock { $0 }!)
            indexNames.withLock { $0.append(names) }
            let second = request.query("cursor") == "c1"
            if second, failSecondPage.load(ordering: .relaxed) { throw URLError(.networkConnectionLost) }
            return ScriptedTransport.page([ScriptedTransport.change("foods", second ? "b" : "a", ["calories": 5])], cursor: second ? "c2" : "c1", hasMore: !second)
        }
        box.withLock { $0 = client }
        await #expect(throws: SyncGateClientError.self) { try await client.sync() }
        let indexed = try await Self.indexNames(client)
        #expect(indexed == ["app_index:foods:calories"])
        #expect(indexNames.withLock { $0 } == [[], []])
        // Not empty any more: the next sync keeps its indexes.
        failSecondPage.store(false, ordering: .relaxed)
        try await client.sync()
        #expect(indexNames.withLock { $0 }.last == ["app_index:foods:calories"])
        #expect(Self.ids(try await client.read(EntityQuery("foods").filter(.equals("calories", 5)))) == ["a", "b"])
    }

    @Test("a first sync cancelled midway still leaves the declared indexes")
    func cancelledBootstrapKeepsIndexes() async throws {
        let (client, transport) = try scriptedClient(configure: { $0.indexes = [LocalIndex(type: "foods", fields: ["calories"])] }) { request in
            if request.query("cursor") == "c1" {
                // The second page never comes: the sync is cancelled while it waits.
                try await Task.sleep(for: .seconds(3600))
            }
            return ScriptedTransport.page([ScriptedTransport.change("foods", "a", ["calories": 5])], cursor: "c1", hasMore: true)
        }
        let sync = Task { try await client.sync() }
        try await eventually("the second page asked for", every: .milliseconds(5)) { transport.requests.count == 2 }
        sync.cancel()
        await #expect(throws: CancellationError.self) { try await sync.value }
        let indexed = try await Self.indexNames(client)
        #expect(indexed == ["app_index:foods:calories"])
        #expect(client.status.connection == .connected && client.status.lastError == nil && !client.status.isDownloading)
        await client.close()
    }

    @Test("read-only SQL reads the view and cannot write")
    func readOnlySQL() async throws {
        let client = try Self.client()
        for (id, data) in Self.foods { try await client.write(type: "foods", id: id, data: data) }
        let lunch = try await client.readDatabase { db in
            try Double.fetchOne(db, sql: "SELECT sum(json_extract(data, '$.calories')) FROM local_entity WHERE entity_type = 'foods' AND json_extract(data, '$.meal') = ?", arguments: ["lunch"])
        }
        #expect(lunch == 570.5)
        await #expect(throws: SyncGateClientError.self) {
            try await client.readDatabase { db in try db.execute(sql: "DELETE FROM local_entity") }
        }
        #expect(try await client.read(EntityQuery("foods")).count == 5)
    }

    @Test("an observed query emits when its result changes, and not for changes outside it")
    func observe() async throws {
        let client = try Self.client()
        for (id, data) in Self.foods { try await client.write(type: "foods", id: id, data: data) }
        var results = client.observe(EntityQuery("foods").filter(.equals("meal", "lunch"))).makeAsyncIterator()
        #expect(Self.ids(try #require(try await results.next())) == ["rice", "soup"])
        // Outside the query: another type, a field the query does not read on an entity it does not select, a non-lunch entity.
        try await client.write(type: "drinks", id: "water", data: ["calories": 0])
        try await client.update(type: "foods", id: "steak", fields: ["note": "rare"])
        try await client.write(type: "foods", id: "pie", data: ["meal": "dessert"])
        // Inside it.
        try await client.update(type: "foods", id: "soup", fields: ["calories": 160])
        let next = try #require(try await results.next())
        #expect(Self.ids(next) == ["rice", "soup"])
        #expect(next.last?.data["calories"] == 160)
        try await client.write(type: "foods", id: "salad", data: ["meal": "lunch"])
        #expect(Self.ids(try #require(try await results.next())) == ["rice", "salad", "soup"])
        // A field that is not one ends the stream with the error.
        var broken = client.observe(EntityQuery("foods").filter(.equals("a b", 1))).makeAsyncIterator()
        await #expect(throws: SyncGateClientError.self) { _ = try await broken.next() }
    }

    @Test("read by id finds the entity in whichever scope holds it; in two it asks for the household")
    func readByID() async throws {
        let client = try Self.client()
        try await client.write(type: "inventory", id: "milk", data: ["quantity": 1], household: "home")
        #expect(try await client.read(type: "inventory", id: "milk")?.householdID == "home")
        #expect(try await client.read(type: "inventory", id: "bread") == nil)
        try await client.write(type: "inventory", id: "milk", data: ["quantity": 2], household: "office")
        await #expect(throws: SyncGateClientError.self) { try await client.read(type: "inventory", id: "milk") }
        #expect(try await client.read(type: "inventory", id: "milk", household: "office")?.data == ["quantity": 2])
        #expect(try await client.read(type: "inventory", id: "milk", household: nil) == nil)
    }
}
