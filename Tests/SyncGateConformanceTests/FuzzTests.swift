import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import SyncGateCore
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// Random mutations of valid requests thrown at the router: no answer is a 5xx, every error
/// has the protocol's body, and the server keeps serving.
@Suite struct FuzzTests {
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
                #expect(status < 500, "iteration \(iteration): \(method) \(uri) → \(status) \(String(buffer: response.body))")
                if status >= 400 {
                    let json = try? JSONParser().parse(Array(response.body.readableBytesView))
                    #expect(json?.errorCode != nil, "iteration \(iteration): error without a protocol body")
                }
            }
            #expect(try await http.send(.get, "/healthz", headers: [:]).status == 200)
            #expect(statuses[400, default: 0] > 100)
            print("fuzz statuses: \(statuses.sorted { $0.key < $1.key })")
        }
    }
}
