import ArgumentParser
import AsyncHTTPClient
import CompressNIO
import Foundation
import NIOCore
import NIOHTTP1
import SyncGateCore
import SyncGateWire
import SyncGateHTTP

extension LoadCommand {
    /// A new device's bootstrap: one user with `--changes` changes (pushed in 1,000-operation
    /// pushes), pulled by fresh devices from the beginning in `--limit`-change pages, plain and
    /// with `Accept-Encoding: gzip`. Prints changes per second and bytes on the wire per change.
    struct BootstrapLoad: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "bootstrap", abstract: "A new device pulling everything: changes/s and bytes per change, plain and gzip."
        )

        @OptionGroup var target: Target
        @Option(help: "Changes the user has (pushed first)") var changes = 50_000
        @Option(help: "Changes per pull page") var limit = 1000
        @Option(help: "Bootstraps per encoding (the median is reported)") var repeats = 3

        func run() async throws {
            guard (1...1_000_000).contains(changes), (1...1000).contains(limit), (1...20).contains(repeats) else {
                throw ValidationError("--changes 1…1,000,000, --limit 1…1,000, --repeats 1…20")
            }
            let authority = try await target.authority()
            // Our own client: the shared one inflates gzip on its own, hiding the bytes on the wire.
            let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(decompression: .disabled))
            do {
                try await measure(LoadClient(base: target.url, http: http), authority: authority)
            } catch {
                try? await http.shutdown()
                throw error
            }
            try await http.shutdown()
        }

        func measure(_ client: LoadClient, authority: TokenAuthority) async throws {
            let user = "bootstrap-\(String(UInt32.random(in: .min ... .max), radix: 36))"
            let token = try await authority.issue(userID: user, ttlSeconds: min(3600, authority.maximumLifetimeSeconds))
            var random = SeededGenerator(seed: 11)
            var pushed = 0
            while pushed < changes {
                let count = min(1000, changes - pushed)
                let operations = (0..<count).map { Workload.operation(user: user, round: pushed / 1000, item: pushed + $0, batch: 1000, random: &random) }
                let body = JSONValue.object(["operations": .array(operations.map(\.json))]).serialized()
                let response = try await client.send(.POST, "/v1/sync/push?wait=30000", token: token, device: "writer", body: body)
                guard response.status == 200 else { throw ValidationError("push answered \(response.status): \(String(describing: response.json))") }
                pushed += count
            }
            print("bootstrap of \(changes) changes in pages of \(limit), \(repeats) device(s) per encoding (median)")
            print("encoding   changes/s   bytes/change   pages")
            for gzip in [false, true] {
                var runs: [(rate: Double, bytes: Double, pages: Int)] = []
                for run in 0..<repeats {
                    runs.append(try await Self.bootstrap(client: client, token: token, device: "new-\(gzip)-\(run)", limit: limit, gzip: gzip, expected: changes))
                }
                let median = runs.sorted { $0.rate < $1.rate }[runs.count / 2]
                print(
                    (gzip ? "gzip" : "identity").padding(toLength: 11, withPad: " ", startingAt: 0)
                        + String(format: "%.0f", median.rate).padding(toLength: 12, withPad: " ", startingAt: 0)
                        + String(format: "%.1f", median.bytes).padding(toLength: 15, withPad: " ", startingAt: 0) + String(median.pages)
                )
            }
        }

        /// Pages from no cursor until `has_more` is false; inflates gzip pages as a client must.
        static func bootstrap(client: LoadClient, token: String, device: String, limit: Int, gzip: Bool, expected: Int) async throws -> (rate: Double, bytes: Double, pages: Int) {
            var cursor: String?
            var received = 0, bytes = 0, pages = 0
            let started = ContinuousClock.now
            for _ in 0..<100_000 {
                var request = HTTPClientRequest(url: client.base + "/v1/sync/pull?limit=\(limit)" + (cursor.map { "&cursor=\($0)" } ?? ""))
                request.headers.add(name: "Authorization", value: "Bearer \(token)")
                request.headers.add(name: "X-Device-Id", value: device)
                if gzip { request.headers.add(name: "Accept-Encoding", value: "gzip") }
                let response = try await client.http.execute(request, timeout: client.timeout)
                var body = try await response.body.collect(upTo: 256 * 1024 * 1024)
                guard response.status == .ok else { throw ValidationError("pull answered \(response.status.code)") }
                bytes += body.readableBytes
                if response.headers.first(name: "Content-Encoding") == "gzip" { body = try body.decompress(with: .gzip()) }
                let page = try JSONParser(maximumDepth: 512).parse(Array(body.readableBytesView))
                received += page["changes"]?.arrayValue?.count ?? 0
                pages += 1
                cursor = page["cursor"]?.stringValue
                if page["has_more"] != .bool(true) { break }
            }
            let seconds = Double(started.duration(to: .now).microseconds) / 1_000_000
            // The user's own changes, plus the daily summaries their food logs derive.
            guard received >= expected else { throw ValidationError("the bootstrap read \(received) changes, expected at least \(expected)") }
            return (Double(received) / seconds, Double(bytes) / Double(received), pages)
        }
    }
}
