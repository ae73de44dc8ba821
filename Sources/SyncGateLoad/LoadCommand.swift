package import ArgumentParser
import AsyncHTTPClient
import Foundation
import Histogram
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateServer
import SyncGateCommandLine

/// `syncgate load`: load generators for benchmarks and capacity checks, kept out of the server's
/// targets (only the `syncgate` executable links them).
package struct LoadCommand: AsyncParsableCommand {
    package init() {}

    package static let configuration = CommandConfiguration(
        commandName: "load",
        abstract: "Generate load against a running server and print latencies.",
        subcommands: [SyncLoad.self, BatchLoad.self, LiveLoad.self, IdleLoad.self, BootstrapLoad.self],
        defaultSubcommand: SyncLoad.self
    )

    /// Where the server is and how to mint tokens for its users.
    struct Target: ParsableArguments {
        @Option(help: "Base URL of the server") var url = "http://127.0.0.1:8080"
        @OptionGroup var common: CommonOptions

        func authority() async throws -> TokenAuthority {
            let (configuration, _) = try await common.configuration()
            do {
                return await TokenAuthority(
                    secret: try SigningSecret.resolve(configured: configuration.jwtSecret, database: configuration.database).value,
                    maximumLifetimeSeconds: configuration.jwtMaximumLifetimeSeconds
                )
            } catch {
                throw ValidationError(error.message)
            }
        }
    }

    /// Pushes from one device of each user while another device long-polls; reports push
    /// latency and push-to-visible latency (the push answered → the other device's pull returns it).
    struct SyncLoad: AsyncParsableCommand, RunsOnEventLoops {
        static let configuration = CommandConfiguration(commandName: "sync", abstract: "Concurrent users pushing and pulling (the default).")

        @OptionGroup var target: Target
        @Option(help: "Concurrent users, each with a pushing and a pulling device") var users = 20
        @Option(help: "Seconds to run at most: SIGINT or SIGTERM ends the run sooner (still reported and verified)") var duration = 20
        @Option(help: "Operations per push") var batch = 10
        @Option(help: "Seed of the generated data") var seed: UInt64 = 1
        @Option(help: "Users are load-<run id>-<n>; random unless given (a benchmark that prepares them)") var runId: String?
        @Option(help: """
            Pushes per second in all (each user's writer keeps its share of a fixed schedule, and \
            a push's latency counts from its scheduled time); without it every writer pushes back \
            to back: saturation
            """)
        var rate: Double?
        @Flag(help: """
            Record every acknowledged operation, retry unanswered pushes with the same keys (as a \
            client would), and at the end pull each user's data on a fresh device and compare; \
            exit non-zero if anything acknowledged is missing or was applied twice.
            """)
        var verify = false

        func run() async throws {
            // A connection for each device (a pool of eight, HTTPClient.shared's, queued pushes
            // behind idle long-polls), accepting gzip as a phone does.
            var configuration = HTTPClient.Configuration.singletonConfiguration
            configuration.connectionPool = .init(idleTimeout: .seconds(600), concurrentHTTP1ConnectionsPerHostSoftLimit: 2 * users + 4)
            let http = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
            do {
                try await run(client: LoadClient(base: target.url, http: http))
                try await http.shutdown()
            } catch {
                try? await http.shutdown()
                throw error
            }
        }

        func run(client: LoadClient) async throws {
            let authority = try await target.authority()
            let runID = runId ?? String(UInt32.random(in: .min ... .max), radix: 36)
            let stats = LoadStats()
            let started = ContinuousClock.now
            let end = LoadEnd(deadline: started + .seconds(duration))
            let signals = end.stopOnSignals()
            defer { signals.forEach { $0.cancel() } }
            print("load: \(users) users × (1 pushing + 1 long-polling device), \(batch) operations per push, \(duration) s, \(rate.map { "\($0) pushes/s" } ?? "back to back"), against \(target.url)")
            // Each writer's pushes are `interval` apart, the writers' schedules staggered evenly.
            let interval = rate.map { Duration.seconds(Double(users) / max($0, 0.001)) }
            var ledgers: [(user: String, token: String, ledger: Ledger)] = []
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<users {
                    let user = "load-\(runID)-\(index)"
                    let token = try await authority.issue(userID: user, ttlSeconds: min(duration + 3600, authority.maximumLifetimeSeconds))
                    let pending = PendingChanges()
                    let ledger = Ledger()
                    ledgers.append((user, token, ledger))
                    let verify = verify
                    group.addTask { try await Self.reader(client: client, token: token, pending: pending, stats: stats, until: end) }
                    let schedule = interval.map { Schedule(start: .now + $0 * (Double(index) / Double(users)), interval: $0) }
                    group.addTask {
                        try await Self.writer(
                            client: client, token: token, user: user, batch: batch, seed: seed &+ UInt64(index), pending: pending, stats: stats,
                            ledger: verify ? ledger : nil, schedule: schedule, until: end
                        )
                    }
                }
                try await group.waitForAll()
            }
            stats.report(seconds: max(1, Int(started.duration(to: .now).components.seconds)), batch: batch)
            if verify {
                var acknowledged = 0, present = 0, lost = 0, twice = 0
                for (user, token, ledger) in ledgers {
                    let check = ledger.check(against: try await Self.everything(client: client, token: token))
                    acknowledged += check.acknowledged
                    present += check.present
                    lost += check.lost.count
                    twice += check.twice.count
                    for id in check.lost.prefix(5) { print("lost: \(user) \(id)") }
                    for id in check.twice.prefix(5) { print("applied twice: \(user) \(id)") }
                }
                print("verify: \(acknowledged) acknowledged, \(present) present, \(lost) lost, \(twice) applied twice")
                if lost > 0 || twice > 0 || acknowledged == 0 { throw ExitCode.failure }
            }
        }

        /// A writer's fixed schedule of pushes (open-loop load).
        struct Schedule: Sendable {
            var start: ContinuousClock.Instant
            var interval: Duration

            func time(of round: Int) -> ContinuousClock.Instant { start + interval * round }
        }

        static func writer(
            client: LoadClient, token: String, user: String, batch: Int, seed: UInt64, pending: PendingChanges, stats: LoadStats, ledger: Ledger?,
            schedule: Schedule? = nil, until end: LoadEnd
        ) async throws {
            var random = SeededGenerator(seed: seed)
            var round = 0
            let deadline = end.deadline
            while !end.isPast {
                // On a schedule, a push waits for its time, and its latency counts from that time
                // (a late push is not excused by the one before it being slow).
                let scheduled = schedule?.time(of: round)
                if let scheduled {
                    guard scheduled < deadline else { break }
                    try await Task.sleep(until: scheduled)
                    if end.isPast { break }
                }
                let operations = (0..<batch).map { item in
                    Workload.operation(user: user, round: round, item: item, batch: batch, random: &random)
                }
                round += 1
                let body = JSONValue.object(["operations": .array(operations.map(\.json))]).serialized()
                let started = scheduled ?? ContinuousClock.now
                guard let ledger else {
                    let response = try await client.send(.POST, "/v1/sync/push?wait=10000", token: token, device: "writer", body: body)
                    let answered = ContinuousClock.now
                    guard response.status == 200 else {
                        stats.recordError("push \(response.status)")
                        if response.status == 429 || response.status >= 500 { try await Task.sleep(for: .milliseconds(200)) }
                        continue
                    }
                    stats.recordPush(started.duration(to: answered), operations: batch)
                    pending.expect(operations.map(\.entityID), answeredAt: answered)
                    continue
                }
                // Verifying: the same push again until the server decides it (a lost answer, a
                // front or database away), then its job followed to the end; bounded in time.
                let giveUp = deadline + .seconds(120)
                guard let results = try await Self.decide(body: body, client: client, token: token, stats: stats, until: giveUp) else { continue }
                let answered = ContinuousClock.now
                stats.recordPush(started.duration(to: answered), operations: batch)
                pending.expect(operations.map(\.entityID), answeredAt: answered)
                ledger.record(results)
            }
        }

        /// Pushes `body` until a final answer: the job's results, or `nil` if none came in time.
        static func decide(body: String, client: LoadClient, token: String, stats: LoadStats, until giveUp: ContinuousClock.Instant) async throws -> [JSONValue]? {
            var job: String?
            while ContinuousClock.now < giveUp {
                let response: (status: Int, json: JSONValue?)
                do {
                    if let job {
                        response = try await client.send(.GET, "/v1/jobs/\(job)?wait=10000", token: token, device: "writer")
                    } else {
                        response = try await client.send(.POST, "/v1/sync/push?wait=10000", token: token, device: "writer", body: body)
                    }
                } catch {
                    stats.recordError("push transport")
                    try await Task.sleep(for: .milliseconds(200))
                    continue
                }
                let status = response.json?["status"]?.stringValue
                if response.status == 200, status == "done" || status == "dead", let results = response.json?["results"]?.arrayValue { return results }
                if response.status == 200 || response.status == 202, let id = response.json?["job_id"]?.stringValue {
                    job = id
                    continue
                }
                // A job forgotten (404) or anything refused: push again with the same keys.
                stats.recordError("push \(response.status)")
                job = nil
                try await Task.sleep(for: .milliseconds(200))
            }
            stats.recordError("push undecided")
            return nil
        }

        /// Every change a fresh device of the user pulls from the beginning: entity id → versions seen.
        static func everything(client: LoadClient, token: String) async throws -> [String: Int64] {
            var cursor: String?
            var latest: [String: Int64] = [:]
            var transportFailures = 0
            var refusals = 0
            for _ in 0..<100_000 {
                let response: (status: Int, json: JSONValue?)
                do {
                    response = try await client.send(.GET, "/v1/sync/pull?limit=1000" + (cursor.map { "&cursor=\($0)" } ?? ""), token: token, device: "verifier")
                } catch where transportFailures < 5 {
                    // A pooled connection to a front killed during the run fails once it is used.
                    transportFailures += 1
                    try await Task.sleep(for: .milliseconds(200))
                    continue
                }
                if response.status == 503 || response.status == 429, refusals < 60 {
                    // The server says "later" (a database just back, not yet seen by this front):
                    // as a device would, try again, for up to about 30 s.
                    refusals += 1
                    try await Task.sleep(for: .milliseconds(500))
                    continue
                }
                guard response.status == 200, let page = response.json else { throw ValidationError("verify: pull answered \(response.status)") }
                for change in page["changes"]?.arrayValue ?? [] {
                    guard let id = change["entity_id"]?.stringValue, let version = change["version"]?.integerValue else { continue }
                    latest[id] = max(latest[id] ?? 0, version)
                }
                cursor = page["cursor"]?.stringValue
                if page["has_more"] != true { return latest }
            }
            throw ValidationError("verify: the pull did not end")
        }

        static func reader(client: LoadClient, token: String, pending: PendingChanges, stats: LoadStats, until end: LoadEnd) async throws {
            var cursor = ""
            while !end.isPast {
                let query = cursor.isEmpty ? "wait=5000" : "cursor=\(cursor)&wait=5000"
                let response: (status: Int, json: JSONValue?)
                do {
                    response = try await client.send(.GET, "/v1/sync/pull?\(query)", token: token, device: "reader")
                } catch {
                    stats.recordError("pull transport")
                    try await Task.sleep(for: .milliseconds(200))
                    continue
                }
                let received = ContinuousClock.now
                guard response.status == 200, let page = response.json else {
                    stats.recordError("pull \(response.status)")
                    try await Task.sleep(for: .milliseconds(200))
                    continue
                }
                cursor = page["cursor"]?.stringValue ?? cursor
                let ids = (page["changes"]?.arrayValue ?? []).compactMap { $0["entity_id"]?.stringValue }
                for visibleAfter in pending.seen(ids, at: received) {
                    stats.recordVisible(visibleAfter)
                }
                stats.recordPull(changes: ids.count)
            }
        }
    }

    /// Times pushes of 1, 100 and 1,000 operations: the apply's round trips do not grow with
    /// the batch, so time per operation falls as batches grow.
    struct BatchLoad: AsyncParsableCommand, RunsOnEventLoops {
        static let configuration = CommandConfiguration(commandName: "batches", abstract: "Push latency by batch size (1, 100, 1,000 operations).")

        @OptionGroup var target: Target
        @Option(help: "Pushes per batch size") var repeats = 20
        @Option(parsing: .upToNextOption, help: "Batch sizes") var sizes: [Int] = [1, 100, 1000]

        func run() async throws {
            let authority = try await target.authority()
            let client = LoadClient(base: target.url)
            let user = "batches-\(String(UInt32.random(in: .min ... .max), radix: 36))"
            let token = try await authority.issue(userID: user, ttlSeconds: min(3600, authority.maximumLifetimeSeconds))
            var random = SeededGenerator(seed: 7)
            print("batch size   pushes   p50 ms   p90 ms   max ms   µs per operation (p50)   operations/s (one stream)")
            for size in sizes {
                var histogram = Histogram<UInt64>(highestTrackableValue: 600_000_000, numberOfSignificantValueDigits: .three)
                var inFlight = Duration.zero
                for round in 0..<repeats {
                    let operations = (0..<size).map { Workload.operation(user: user, round: size * 1000 + round, item: $0, batch: size, random: &random) }
                    let body = JSONValue.object(["operations": .array(operations.map(\.json))]).serialized()
                    let started = ContinuousClock.now
                    let response = try await client.send(.POST, "/v1/sync/push?wait=30000", token: token, device: "bench", body: body)
                    guard response.status == 200 else { throw ValidationError("push answered \(response.status): \(String(describing: response.json))") }
                    let took = started.duration(to: .now)
                    inFlight += took
                    _ = histogram.record(UInt64(took.microseconds))
                }
                let median = Double(histogram.valueAtPercentile(50)) / 1000
                // One push after another: the operations over the time the pushes took.
                let throughput = Double(size * repeats) / (Double(inFlight.microseconds) / 1_000_000)
                print(
                    String(size).padding(toLength: 13, withPad: " ", startingAt: 0) + String(repeats).padding(toLength: 9, withPad: " ", startingAt: 0)
                        + Self.format(median) + Self.format(Double(histogram.valueAtPercentile(90)) / 1000) + Self.format(Double(histogram.max) / 1000)
                        + String(format: "%.0f", median * 1000 / Double(size)).padding(toLength: 25, withPad: " ", startingAt: 0)
                        + String(format: "%.0f", throughput)
                )
            }
        }

        static func format(_ value: Double) -> String {
            String(format: "%.1f", value).padding(toLength: 9, withPad: " ", startingAt: 0)
        }
    }
}

/// The generated data: a mix of the reference apps' user-scoped types.
enum Workload {
    /// Operation `item` of push `round` of `user`, whose pushes hold `batch` operations each.
    static func operation(user: String, round: Int, item: Int, batch: Int, random: inout SeededGenerator) -> SyncOperation {
        let id = "\(round)-\(item)"
        let sequence = round * batch + item
        let now = Timestamp.now()
        switch item % 4 {
        case 0:
            let items: [JSONValue] = (0..<Int.random(in: 1...4, using: &random)).map { index in
                ["id": .string("i\(index)"), "name": "food", "calories": .int(Int64.random(in: 50...600, using: &random)), "protein": .double(Double(Int.random(in: 0...300, using: &random)) / 10)]
            }
            // A user logs about a dozen foods a day (a quarter of the operations are food logs, so
            // 48 operations make a day), then the next day begins. Days drawn from one month piled
            // a long run's logs onto the same days, and each push re-sums its days' logs: the cost
            // grew with the length of the run, not with the push.
            let day = String(Timestamp(millisecondsSinceEpoch: 1_767_225_600_000 + Int64(sequence / 48) * 86_400_000).rfc3339.prefix(10))
            return SyncOperation(idempotencyKey: "\(user)-\(id)", entityType: "foodLogs", entityID: "fl-\(id)", intent: .create,
                                 data: ["loggedDate": .string(day), "mealType": "lunch", "items": .array(items)], clientTimestamp: now)
        case 1:
            return SyncOperation(idempotencyKey: "\(user)-\(id)", entityType: "weightLogs", entityID: "w-\(id)", intent: .create,
                                 data: ["kg": .double(Double(Int.random(in: 500...1200, using: &random)) / 10)], clientTimestamp: now)
        case 2:
            return SyncOperation(idempotencyKey: "\(user)-\(id)", entityType: "visitedPlaces", entityID: "p-\(id)", intent: .create,
                                 data: ["name": "Somewhere", "lat": .double(Double.random(in: -90...90, using: &random))], clientTimestamp: now)
        default:
            return SyncOperation(idempotencyKey: "\(user)-\(id)", entityType: "contacts", entityID: "c-\(id)", intent: .create,
                                 data: ["name": "Ada", "email": "ada@example.com"], clientTimestamp: now)
        }
    }
}

/// What the server acknowledged to one user's writer: entity id → the version its create was
/// decided at (every generated operation creates a new entity, so that is version 1).
final class Ledger: Sendable {
    private let state = Mutex<[String: Int64]>([:])

    func record(_ results: [JSONValue]) {
        state.withLock { acknowledged in
            for result in results {
                guard let id = result["entity_id"]?.stringValue, let version = result["version"]?.integerValue else { continue }
                switch result["status"]?.stringValue {
                case "applied", "duplicate": acknowledged[id] = version
                default: break
                }
            }
        }
    }

    /// Acknowledged entities missing from `pulled` (lost), or pulled at another version than
    /// acknowledged (a create applied twice would have made version 2).
    func check(against pulled: [String: Int64]) -> (acknowledged: Int, present: Int, lost: [String], twice: [String]) {
        state.withLock { acknowledged in
            let lost = acknowledged.keys.filter { pulled[$0] == nil }.sorted()
            let twice = acknowledged.filter { id, version in pulled[id].map { $0 != version } ?? false }.keys.sorted()
            return (acknowledged.count, acknowledged.count - lost.count, lost, twice)
        }
    }
}

/// Entities a user's writer pushed that the reader has not seen yet, with when their push was answered.
final class PendingChanges: Sendable {
    private let state = Mutex<[String: ContinuousClock.Instant]>([:])

    func expect(_ ids: [String], answeredAt instant: ContinuousClock.Instant) {
        state.withLock { pending in
            for id in ids where pending[id] == nil { pending[id] = instant }
        }
    }

    /// Push-to-visible durations of the ids now seen (zero when the change was visible before the push answered).
    func seen(_ ids: [String], at instant: ContinuousClock.Instant) -> [Duration] {
        state.withLock { pending in
            ids.compactMap { id in pending.removeValue(forKey: id).map { max(.zero, $0.duration(to: instant)) } }
        }
    }
}

final class LoadStats: Sendable {
    private struct State {
        var push = Histogram<UInt64>(highestTrackableValue: 600_000_000, numberOfSignificantValueDigits: .three)
        var visible = Histogram<UInt64>(highestTrackableValue: 600_000_000, numberOfSignificantValueDigits: .three)
        var operations = 0
        var pulls = 0
        var pulledChanges = 0
        var errors: [String: Int] = [:]
    }

    private let state = Mutex(State())

    func recordPush(_ duration: Duration, operations: Int) {
        state.withLock {
            _ = $0.push.record(UInt64(duration.microseconds))
            $0.operations += operations
        }
    }

    func recordVisible(_ duration: Duration) {
        state.withLock { _ = $0.visible.record(UInt64(duration.microseconds)) }
    }

    func recordPull(changes: Int) {
        state.withLock {
            $0.pulls += 1
            $0.pulledChanges += changes
        }
    }

    func recordError(_ kind: String) {
        state.withLock { $0.errors[kind, default: 0] += 1 }
    }

    func report(seconds: Int, batch: Int) {
        state.withLock { state in
            func milliseconds(_ histogram: Histogram<UInt64>, _ percentile: Double) -> String {
                String(format: "%.1f", Double(histogram.valueAtPercentile(percentile)) / 1000)
            }
            let pushes = state.push.totalCount
            print("pushes:              \(pushes) (\(String(format: "%.1f", Double(pushes) / Double(seconds)))/s), operations applied: \(state.operations) (\(String(format: "%.0f", Double(state.operations) / Double(seconds)))/s)")
            print("push latency (ms):   p50 \(milliseconds(state.push, 50))  p90 \(milliseconds(state.push, 90))  p99 \(milliseconds(state.push, 99))  max \(String(format: "%.1f", Double(state.push.max) / 1000))")
            print("push → visible (ms): p50 \(milliseconds(state.visible, 50))  p90 \(milliseconds(state.visible, 90))  p99 \(milliseconds(state.visible, 99))  max \(String(format: "%.1f", Double(state.visible.max) / 1000))  (\(state.visible.totalCount) changes)")
            print("pulls:               \(state.pulls), changes delivered: \(state.pulledChanges)")
            print("errors:              \(state.errors.isEmpty ? "none" : state.errors.sorted { $0.key < $1.key }.map { "\($0.key) × \($0.value)" }.joined(separator: ", "))")
        }
    }
}

/// When a load run stops making requests: at its deadline, or sooner once SIGINT or SIGTERM came.
struct LoadEnd: Sendable {
    let deadline: ContinuousClock.Instant
    private let stopped = Arc()

    init(deadline: ContinuousClock.Instant) { self.deadline = deadline }

    var isPast: Bool { stopped.flag.load(ordering: .relaxed) || ContinuousClock.now >= deadline }

    /// Makes SIGINT and SIGTERM end the run rather than the process, while the sources returned live.
    func stopOnSignals() -> [any DispatchSourceSignal] {
        [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [stopped] in
                stopped.flag.store(true, ordering: .relaxed)
                print("load: signal \(number): stopping, then reporting")
            }
            source.resume()
            return source
        }
    }

    private final class Arc: Sendable {
        let flag = Atomic(false)
    }
}

/// A small JSON-over-HTTP client for the load generator.
struct LoadClient: Sendable {
    let base: String
    var http: HTTPClient = .shared
    var timeout: TimeAmount = .seconds(70)

    func send(_ method: HTTPMethod, _ path: String, token: String, device: String, body: String? = nil) async throws -> (status: Int, json: JSONValue?) {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "X-Device-Id", value: device)
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await http.execute(request, timeout: timeout)
        let bytes = try await response.body.collect(upTo: 64 * 1024 * 1024)
        return (Int(response.status.code), try? JSONParser(maximumDepth: 512).parse(Array(bytes.readableBytesView)))
    }
}

extension Duration {
    var microseconds: Int64 {
        let (seconds, attoseconds) = components
        return max(0, seconds * 1_000_000 + attoseconds / 1_000_000_000_000)
    }
}
