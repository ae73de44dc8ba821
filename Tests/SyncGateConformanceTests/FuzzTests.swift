import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import SyncGateCore
import SyncGateWire
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// Random mutations of valid requests thrown at the router: no answer is a 5xx, every error
/// has the protocol's body, and afterwards every accepted push finishes (none dead, none stuck)
/// and a normal push still applies promptly.
@Suite(.timeLimit(.minutes(10))) struct FuzzTests {
    static let validPush = ProcessClient.pushBody([
        Op.create("foodLogs", "f", ["loggedDate": "2026-01-15", "mealType": "lunch", "items": [["id": "a", "calories": 1]]], key: "k1", at: Op.clock),
        Op.update("inventory", "i", base: 1, ["qty": 2, "note": nil], key: "k2", household: "h", at: Op.clock),
        Op.delete("weightLogs", "w", base: 3, key: "k3", at: Op.clock),
    ])

    static let fragments: [String] = [
        "null", "true", "-0", "1e309", "\"\"", "[]", "{}", "\"\\ud800\"", "\"\\u0000\"", String(repeating: "[", count: 5000),
        String(repeating: "x", count: 70_000), "{\"a\":" + String(repeating: "{\"a\":", count: 40) + "1" + String(repeating: "}", count: 41),
        "9223372036854775808", "-9223372036854775809", "0.0000000001", "\"2026-02-30\"", "\"0000-00-00T00:00:00Z\"",
    ]

    static func mutate(_ text: String, _ random: inout SeededGenerator) -> [UInt8] {
        var bytes = Array(text.utf8)
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            switch Int.random(in: 0..<7, using: &random) {
            case 0 where !bytes.isEmpty:  // flip a byte
                let index = Int.random(in: 0..<bytes.count, using: &random)
                bytes[index] = UInt8.random(in: 0...255, using: &random)
            case 1 where !bytes.isEmpty:  // truncate
                bytes = Array(bytes.prefix(Int.random(in: 0..<bytes.count, using: &random)))
            case 2:  // splice a hostile fragment at a random place
                let index = Int.random(in: 0...bytes.count, using: &random)
                bytes.insert(contentsOf: Array(fragments.randomElement(using: &random)!.utf8), at: index)
            case 3:  // replace a JSON scalar with a hostile fragment
                let text = String(decoding: bytes, as: UTF8.self)
                let scalars = ["\"create\"", "\"update\"", "3", "\"k1\"", "\"foodLogs\"", "\"2026-01-15\"", "\"h\"", "null", "1"]
                let target = scalars.randomElement(using: &random)!
                if let range = text.range(of: target) {
                    bytes = Array(text.replacingCharacters(in: range, with: fragments.randomElement(using: &random)!).utf8)
                }
            case 4 where bytes.count > 2:  // duplicate a slice
                let start = Int.random(in: 0..<bytes.count, using: &random)
                let end = Int.random(in: start..<bytes.count, using: &random)
                bytes.insert(contentsOf: bytes[start...end], at: end)
            case 5:  // invalid UTF-8
                bytes.insert(contentsOf: [0xC3, 0x28, 0xFF], at: Int.random(in: 0...bytes.count, using: &random))
            default:  // delete a slice
                guard bytes.count > 1 else { continue }
                let start = Int.random(in: 0..<bytes.count, using: &random)
                bytes.removeSubrange(start..<min(bytes.count, start + Int.random(in: 1...20, using: &random)))
            }
        }
        return bytes
    }

    @Test(arguments: Driver.selected)
    func randomRequestsNeverGetA5xx(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 1) { http in
            var random = SeededGenerator(seed: 20_261_121)
            let token = try await http.token()
            let queries = ["", "?wait=0", "?wait=99999999999999999999", "?wait=-1", "?limit=0", "?limit=1001", "?cursor=%FF%FE", "?entity_types=,,,",
                           "?cursor=v1.eyJ1IjoiYWxpY2UifQ.0000000000000000", "?unknown=1", "?wait=1&wait=2", "?limit=" + String(repeating: "9", count: 500)]
            let paths = ["/v1/sync/push", "/v1/sync/pull", "/v1/jobs/1", "/v1/jobs/-1", "/v1/jobs/%00", "/v1/sync/events", "/healthz", "/nope", "/v1/sync/push/extra"]
            let devices = ["d1", "", "bad device", String(repeating: "d", count: 300), "ok:device.1_-"]
            var statuses: [Int: Int] = [:]
            var accepted: [Int64] = []
            for iteration in 0..<600 {
                var headers: HTTPFields = [.contentType: "application/json"]
                if Int.random(in: 0..<10, using: &random) > 0 {
                    headers[.authorization] = Int.random(in: 0..<10, using: &random) > 0 ? "Bearer \(token)" : "Bearer \(token.dropLast(Int.random(in: 1...5, using: &random)))"
                }
                if Int.random(in: 0..<10, using: &random) > 0 {
                    headers[HTTPField.Name("X-Device-Id")!] = devices.randomElement(using: &random)!
                }
                let path = iteration % 3 == 0 ? paths.randomElement(using: &random)! : "/v1/sync/push"
                let query = queries.randomElement(using: &random)!
                // Never wait: with wait=0 the fuzz run stays fast.
                let uri = path + (path == "/v1/sync/push" && query.isEmpty ? "?wait=0" : query)
                let body = Self.mutate(Self.validPush, &random)
                let method: HTTPRequest.Method = path.hasSuffix("push") ? .post : (Bool.random(using: &random) ? .get : .post)
                if path == "/v1/sync/events", method == .get, headers[.authorization] != nil { continue }  // a stream never ends
                let response = try await http.client.executeRequest(uri: uri, method: method, headers: headers, body: ByteBuffer(bytes: body))
                let status = Int(response.status.code)
                statuses[status, default: 0] += 1
                if path == "/v1/sync/push", status == 202 || status == 200,
                   let id = (try? JSONParser().parse(Array(response.body.readableBytesView)))?["job_id"]?.stringValue.flatMap({ Int64($0) }) {
                    accepted.append(id)
                }
                #expect(status < 500, "iteration \(iteration): \(method) \(uri) → \(status) \(String(buffer: response.body))")
                if status >= 400 {
                    let json = try? JSONParser().parse(Array(response.body.readableBytesView))
                    #expect(json?.errorCode != nil, "iteration \(iteration): error without a protocol body")
                }
            }
            // Well-formed pushes with hostile content reach the workers.
            for round in 0..<150 {
                let operations = (0..<Int.random(in: 1...5, using: &random)).map { Self.hostileOperation(&random, key: "h\(round)-\($0)") }
                let body = JSONValue.object(["operations": .array(operations)]).serialized()
                let response = try await http.client.executeRequest(
                    uri: "/v1/sync/push?wait=0", method: .post,
                    headers: [.authorization: "Bearer \(token)", .contentType: "application/json", HTTPField.Name("X-Device-Id")!: "fuzzer"],
                    body: ByteBuffer(string: body)
                )
                let status = Int(response.status.code)
                statuses[status, default: 0] += 1
                #expect(status < 500, "round \(round): \(status) \(String(buffer: response.body))")
                if let id = (try? JSONParser().parse(Array(response.body.readableBytesView)))?["job_id"]?.stringValue.flatMap({ Int64($0) }) {
                    accepted.append(id)
                }
            }
            #expect(try await http.send(.get, "/healthz", headers: [:]).status == 200)
            #expect(statuses[400, default: 0] > 100)
            #expect(accepted.count > 100, "most hostile-but-well-formed pushes reach the workers")
            // Every accepted push finishes, and a poison document stalls nothing: none is dead.
            var outcomes: [String: Int] = [:]
            for id in accepted {
                let job = try await http.store.waitFinished(id)
                #expect(job.state == .done, "job \(id) is \(job.state): \(job.lastError ?? "")")
                for result in try job.decodedResults() ?? [] { outcomes[result.outcome, default: 0] += 1 }
            }
            // The queue still moves: a normal push applies at once.
            let started = ContinuousClock.now
            let normal = try await http.push([Op.create("weightLogs", "after-fuzz", ["kg": 70])], wait: 30_000)
            #expect(normal.status == 200 && normal.json?["results"]?[0]?["status"] == "applied")
            #expect(started.duration(to: .now) < NotificationTests.promptly, "applied after \(started.duration(to: .now))")
            print("fuzz (\(driver)): 750 requests, statuses \(statuses.sorted { $0.key < $1.key }); \(accepted.count) pushes accepted, operation outcomes \(outcomes.sorted { $0.key < $1.key })")
        }
    }

    /// A well-formed operation whose content is hostile: any type (known or not), intent and base
    /// version, household ids with colons, and documents full of what breaks storage layers.
    static func hostileOperation(_ random: inout SeededGenerator, key: String) -> JSONValue {
        let types = ["foodLogs", "weightLogs", "userGoals", "recentFoods", "inventory", "timeEntries", "projects", "households", "household_members", "dailySummaries", "unknownType"]
        let type = types.randomElement(using: &random)!
        var operation: JSONObject = [
            "idempotency_key": .string(key),
            "entity_type": .string(type),
            "entity_id": .string(["e1", "e2", "h:bob", "h", "2026-01-15", "ünïcødé-😀"].randomElement(using: &random)!),
            "intent": .string(["create", "create", "update", "delete"].randomElement(using: &random)!),
            "base_version": .int(Int64.random(in: 0...3, using: &random)),
            "client_timestamp": .string(["2026-01-15T10:00:00Z", "9999-12-31T23:59:59.999Z", "1970-01-01T00:00:00Z", "2026-01-15T10:00:00.123456789+14:00"].randomElement(using: &random)!),
        ]
        if Bool.random(using: &random) { operation["household_id"] = .string(["h", "h:x", "other"].randomElement(using: &random)!) }
        var data: JSONObject = [:]
        for index in 0..<Int.random(in: 0...6, using: &random) {
            data[hostileKey(&random, index: index)] = hostileValue(&random, depth: 0)
        }
        if type == "foodLogs", Bool.random(using: &random) {
            data["loggedDate"] = .string(["2026-01-15", "2026-02-30", "\u{0}"].randomElement(using: &random)!)
            data["mealType"] = "lunch"
            data["items"] = .array((0..<Int.random(in: 0...4, using: &random)).map { _ in
                .object(["id": .string(["a", "a", "b\u{0}"].randomElement(using: &random)!), "calories": hostileValue(&random, depth: 28),
                         "updatedAt": [.string("2026-01-15T10:00:00Z"), .string("garbage"), .null, .int(5)].randomElement(using: &random)!])
            })
        }
        operation["data"] = .object(data)
        return .object(operation)
    }

    static func hostileKey(_ random: inout SeededGenerator, index: Int) -> String {
        ["k\(index)", "", "a.b", "$where", "nul\u{0}key", "😀", String(repeating: "k", count: 300), "__proto__", "user_id", "role"].randomElement(using: &random)!
    }

    static func hostileValue(_ random: inout SeededGenerator, depth: Int) -> JSONValue {
        switch Int.random(in: 0..<12, using: &random) {
        case 0: return .string("nul\u{0}inside")
        case 1: return .string(String(repeating: "x", count: Int.random(in: 0...20_000, using: &random)))
        case 2: return .int([Int64.max, Int64.min, 0, -1].randomElement(using: &random)!)
        case 3: return .double([1e308, -1e308, 5e-324, -0.0, 0.1].randomElement(using: &random)!)
        case 4: return .string("\u{1}\u{1F}\u{7F}\u{2028}\u{FEFF}")
        case 5 where depth < 30: return .array((0..<Int.random(in: 0...3, using: &random)).map { _ in hostileValue(&random, depth: depth + 1) })
        case 6 where depth < 30: return .object(["n": hostileValue(&random, depth: depth + 1), "\u{0}": .bool(true)])
        case 7: return .null
        case 8: return .bool(Bool.random(using: &random))
        case 9: return .string("'; DROP TABLE entities; --")
        default: return .string("plain")
        }
    }
}
