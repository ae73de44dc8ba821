import Foundation
import SyncGateClient

/// The SDK's local costs, no server involved: the bootstrap of a store (pull pages of 1,000
/// changes served from memory through the SDK's real pull path: parse, apply, cursor) in
/// changes/s, the p50 of filtered, sorted queries over it with and without their declared
/// index, and the push of an outbox of a fifth as many writes made offline, in writes/s.
/// `scripts/bench-sdk` builds it in release and runs it.
@main
struct SDKBench {
    static func main() async throws {
        let arguments = CommandLine.arguments.dropFirst()
        let entities = arguments.first.flatMap(Int.init) ?? 100_000
        let runs = arguments.dropFirst().first.flatMap(Int.init) ?? 50
        let folder = FileManager.default.temporaryDirectory.appending(path: "syncgate-sdk-bench-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }

        print("SyncGate SDK bench: \(entities) entities, pull pages of 1,000, \(runs) runs per query")
        let pages = PageServer.pages(entities: entities)
        let indexes = [LocalIndex(type: "foods", fields: ["calories"]), LocalIndex(type: "foods", fields: ["mealType", "loggedDate"])]
        var clients: [(String, SyncClient)] = []
        for (label, declared) in [("without indexes", [LocalIndex]()), ("with 2 indexes", indexes)] {
            var configuration = SyncClient.Configuration(
                serverURL: URL(string: "http://bench.invalid")!, databasePath: "\(folder)/\(clients.count).sqlite", deviceID: "bench"
            ) { "token" }
            configuration.indexes = declared
            configuration.pullPageSize = 1000
            let client = try SyncClient(configuration, transport: PageServer(pages: pages))
            let started = ContinuousClock.now
            let report = try await client.sync()
            let seconds = (ContinuousClock.now - started).seconds
            precondition(report.pulledChanges == entities, "pulled \(report.pulledChanges)")
            print(String(format: "bootstrap %@: %d changes in %.2f s = %.0f changes/s (goal ≥ 20,000)", label, entities, seconds, Double(entities) / seconds))
            clients.append((label, client))
        }

        let queries: [(String, EntityQuery)] = [
            ("calories 300…310, by calories desc, limit 50",
             EntityQuery("foods").filter(.between("calories", 300, 310)).sorted(by: "calories", .descending).limit(50)),
            ("mealType = lunch, loggedDate in one week, by loggedDate, limit 100",
             EntityQuery("foods").filter(.equals("mealType", "lunch")).filter(.between("loggedDate", "2026-03-01", "2026-03-07"))
                .sorted(by: "loggedDate").limit(100)),
        ]
        for (name, query) in queries {
            var medians: [String: Double] = [:]
            var counts: Set<Int> = []
            for (label, client) in clients {
                var times: [Double] = []
                for _ in 0..<runs {
                    let started = ContinuousClock.now
                    counts.insert(try await client.read(query).count)
                    times.append((ContinuousClock.now - started).seconds * 1000)
                }
                times.sort()
                medians[label] = times[times.count / 2]
                print(String(format: "query %@ %@: p50 %.3f ms, p95 %.3f ms", name, label, times[times.count / 2], times[times.count * 95 / 100]))
            }
            precondition(counts.count == 1, "the two stores answered differently: \(counts)")
            print(String(format: "query %@: the index makes it %.1f× faster (%d results)", name, medians["without indexes"]! / medians["with 2 indexes"]!, counts.first!))
        }
        for (_, client) in clients { await client.close() }

        // An outbox filled offline, pushed in batches of 100 to a server that applies each at once.
        let writes = max(1, entities / 5)
        var configuration = SyncClient.Configuration(serverURL: URL(string: "http://bench.invalid")!, databasePath: "\(folder)/outbox.sqlite", deviceID: "bench") { "token" }
        configuration.batchOperations = 100
        let client = try SyncClient(configuration, transport: PushServer())
        for item in 0..<writes {
            try await client.write(type: "foods", id: "o\(item)", data: ["name": .string("food \(item)"), "calories": .int(Int64(item % 1000))])
        }
        let started = ContinuousClock.now
        let report = try await client.sync()
        let seconds = (ContinuousClock.now - started).seconds
        precondition(report.settled.count == writes && report.pending == 0, "settled \(report.settled.count), pending \(report.pending)")
        print(String(format: "outbox of %d writes pushed in batches of 100: %.2f s = %.0f writes/s", writes, seconds, Double(writes) / seconds))
        await client.close()
    }
}

/// Answers every push at once with each operation applied at version 1; pulls are empty.
struct PushServer: SyncTransport {
    func send(_ request: TransportRequest) async throws -> TransportResponse {
        guard request.path.hasPrefix("/v1/sync/push") else {
            let page: JSONValue = ["changes": [], "cursor": "c", "has_more": false, "force_resync": false, "scopes": ["added": [], "removed": []], "device_watermark": "0"]
            return TransportResponse(status: 200, headers: ["content-type": "application/json"], body: Array(page.serialized().utf8))
        }
        let operations = try JSONValue(parsing: request.body ?? [])["operations"]?.arrayValue ?? []
        let results: [JSONValue] = operations.map { operation in
            ["idempotency_key": operation["idempotency_key"] ?? .null, "entity_type": operation["entity_type"] ?? .null,
             "entity_id": operation["entity_id"] ?? .null, "status": "applied", "version": 1]
        }
        let answer: JSONValue = ["job_id": "1", "status": "done", "results": .array(results)]
        return TransportResponse(status: 200, headers: ["content-type": "application/json"], body: Array(answer.serialized().utf8))
    }

    func stream(_ request: TransportRequest) async throws -> TransportStream {
        TransportStream(status: 404, body: AsyncThrowingStream { $0.finish() })
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// Serves pre-made pull pages by cursor, as a server would, from memory.
struct PageServer: SyncTransport {
    let pages: [[UInt8]]

    /// Pages of 1,000 changes of `foods` documents (about 230 bytes each), made once before timing.
    static func pages(entities: Int) -> [[UInt8]] {
        let meals = ["breakfast", "lunch", "dinner", "snack"]
        var pages: [[UInt8]] = []
        var index = 0
        while index < entities {
            let end = min(index + 1000, entities)
            var changes: [JSONValue] = []
            for item in index..<end {
                let day = item % 365
                let date = String(format: "2026-%02d-%02d", day / 28 % 12 + 1, day % 28 + 1)
                let data: JSONObject = [
                    "name": .string("food \(item)"), "calories": .int(Int64(item * 7919 % 1000)), "mealType": .string(meals[item % 4]),
                    "loggedDate": .string(date), "servings": .double(Double(item % 5) + 0.5), "tags": ["bench", .string(meals[item % 4])],
                    "note": .string("a note of some length for entity number \(item)"),
                ]
                changes.append([
                    "entity_type": "foods", "entity_id": .string("f\(item)"), "version": 1, "operation": "upsert", "data": .object(data),
                    "household_id": .null, "updated_at": "2026-01-15T10:00:00.000Z",
                ])
            }
            let page: JSONValue = [
                "changes": .array(changes), "cursor": .string("c\(pages.count + 1)"), "has_more": .bool(end < entities), "force_resync": false,
                "scopes": ["added": [], "removed": []], "device_watermark": "0",
            ]
            pages.append(Array(page.serialized().utf8))
            index = end
        }
        return pages
    }

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        let query = request.path.split(separator: "?").dropFirst().first ?? ""
        let cursor = query.split(separator: "&").first { $0.hasPrefix("cursor=") }.map { Int($0.dropFirst("cursor=c".count)) ?? 0 } ?? 0
        return TransportResponse(status: 200, headers: ["content-type": "application/json"], body: pages[cursor])
    }

    func stream(_ request: TransportRequest) async throws -> TransportStream {
        TransportStream(status: 404, body: AsyncThrowingStream { $0.finish() })
    }
}
