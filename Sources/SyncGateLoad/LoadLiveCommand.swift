import ArgumentParser
import AsyncHTTPClient
import Foundation
import Histogram
import NIOCore
import NIOHTTP1
import NIOPosix
import PostgresNIO
import Synchronization
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateServer
import SyncGateCommandLine
import SyncGateStorage

#if canImport(Glibc)
import Glibc
#endif
import SyncGateConcurrency

extension LoadCommand {
    /// Many idle live connections, then pushes to one household: what holding devices costs the
    /// front and the database while nothing happens, and how fast a household's change reaches
    /// every connected member.
    struct LiveLoad: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "live",
            abstract: "Idle long-polls and event streams, then household pushes: idle cost and fan-out latency."
        )

        @OptionGroup var target: Target
        @Option(help: "Idle long-polls held open") var longPolls = 1000
        @Option(help: "The long-polls' wait in ms (the members' too): each re-polls this often") var wait = 30000
        @Option(help: "Idle event streams held open") var streams = 0
        @Option(help: "Users the idle connections belong to (default: one per connection)") var users: Int?
        @Option(help: "Households the idle users are spread over (each idle user joins one)") var households = 0
        @Option(help: "Members of the measured household, each holding a long-poll in this process") var members = 1000
        @Option(help: "Pushes to the measured household, one at a time") var pushes = 10
        @Option(help: "Seconds to measure while idle") var idleSeconds = 20
        @Option(help: "Processes holding the idle connections (each below its open-files limit)") var processes = 1
        @Option(help: "PID of the front, for its CPU time and memory") var frontPID: Int32?
        @Option(help: "postgres:// URL to read pg_stat_database and pg_stat_statements from") var statsURL: String?
        @Option(help: "Idle connections opened per second, per process (each first costs the server a pull)") var rampRate = 200

        func run() async throws {
            let authority = try await target.authority()
            guard let url = URL(string: target.url), url.host != nil, url.port != nil else {
                throw ValidationError("--url must be http://HOST:PORT")
            }
            let runID = String(UInt32.random(in: .min ... .max), radix: 36)
            let idleCount = longPolls + streams
            let idleUsers = max(1, users ?? idleCount)
            print("live load: \(longPolls) idle long-polls + \(streams) idle event streams over \(idleUsers) users (\(households) households) in \(processes) process(es); \(members) members of one household long-polling; against \(target.url)")

            let before = frontPID.flatMap(ProcessStats.read)
            if let frontPID, before == nil { throw ValidationError("no process \(frontPID) to measure (--front-pid)") }
            if households > 0 {
                try await Self.createIdleHouseholds(url: target.url, authority: authority, run: runID, households: households, users: idleUsers)
            }
            // The idle connections, in child processes (each process may open only so many files).
            var parts: [IdleProcess] = []
            let perProcess = (idleCount + processes - 1) / max(processes, 1)
            for part in 0..<processes where part * perProcess < idleCount {
                let range = (part * perProcess)..<min(idleCount, (part + 1) * perProcess)
                parts.append(try IdleProcess.start(arguments: [
                    "load", "idle", "--url", target.url, "--run", runID, "--first", "\(range.lowerBound)", "--count", "\(range.count)",
                    "--long-polls", "\(longPolls)", "--users", "\(idleUsers)", "--households", "\(households)", "--ttl", "\(idleSeconds + 3600)",
                    "--ramp-rate", "\(rampRate)", "--wait", "\(wait)",
                ] + target.common.arguments))
            }
            defer { parts.forEach { $0.stop() } }
            var opened = 0
            for part in parts { opened += try await part.waitUntilReady() }
            // Settled once no idle connection was answered at once (a refusal, a 503 while
            // opening) for 5 s; long-polls reaching their wait and polling again are the idle load.
            var settled = false
            for _ in 0..<60 where !settled {
                var quick = 0
                for part in parts { quick += await part.answeredSinceReady().quick }
                try await Task.sleep(for: .seconds(5))
                var again = 0
                for part in parts { again += await part.answeredSinceReady().quick }
                settled = again == quick
            }
            print("idle connections open: \(opened)\(settled ? "" : " (never settled: connections keep being answered at once)")")

            // The household, its members and their long-polls.
            try await LiveClient.with(base: target.url, connections: members + 16) { client in
            let owner = "live-\(runID)-owner"
            let ownerToken = try await authority.issue(userID: owner, ttlSeconds: 7200)
            let household = "live-\(runID)"
            let memberIDs = (0..<members).map { "live-\(runID)-m\($0)" }
            let setup = [SyncOperation(idempotencyKey: "\(household)-create", entityType: "households", entityID: household, intent: .create, data: ["name": "Live"], clientTimestamp: .now())]
                + memberIDs.map { member in
                    SyncOperation(idempotencyKey: "\(household)-\(member)", entityType: "household_members", entityID: "\(household):\(member)", intent: .create,
                                  data: ["user_id": .string(member), "role": "member"], clientTimestamp: .now())
                }
            for chunk in stride(from: 0, to: setup.count, by: 500) {
                let operations = Array(setup[chunk..<min(setup.count, chunk + 500)])
                let response = try await client.send(.POST, "/v1/sync/push?wait=30000", token: ownerToken, device: "owner", body: JSONValue.object(["operations": .array(operations.map(\.json))]).serialized())
                guard response.status == 200 else { throw ValidationError("household set-up push answered \(response.status): \(String(describing: response.json))") }
            }
            let wakes = WakeTimes()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for member in memberIDs {
                    let token = try await authority.issue(userID: member, ttlSeconds: 7200)
                    group.addTask { try await Self.member(client: client, token: token, wait: wait, wakes: wakes) }
                }
                try await eventually(wakes, armed: members, timeout: .seconds(120))
                // Let every server-side registration settle before measuring: each member's
                // first long-poll reads once, and beside 16,000 idle connections those 1,000
                // reads took more than 3 s to drain (they showed as ~66 statements/s of "idle").
                try await Task.sleep(for: .seconds(15))

                let withConnections = frontPID.flatMap(ProcessStats.read)
                if let before, let withConnections, opened + members > 0 {
                    let perConnection = Double(withConnections.residentBytes - before.residentBytes) / Double(opened + members)
                    print(String(format: "front memory: %.0f MiB before, %.0f MiB with %d connections: %.1f KiB per connection",
                                 Double(before.residentBytes) / 1_048_576, Double(withConnections.residentBytes) / 1_048_576, opened + members, perConnection / 1024))
                }

                // Idle: nothing pushed.
                var answeredBefore = 0
                for part in parts { answeredBefore += await part.answeredSinceReady().all }
                let database = try statsURL.map { try DatabaseStats(url: $0) }
                let startDB = try await database?.sample()
                let startCPU = frontPID.flatMap(ProcessStats.read)
                let started = ContinuousClock.now
                try await Task.sleep(for: .seconds(idleSeconds))
                let elapsed = Self.seconds(started.duration(to: .now))
                let endCPU = frontPID.flatMap(ProcessStats.read)
                let endDB = try await database?.sample()
                var line = String(format: "idle %.1f s:", elapsed)
                if let startCPU, let endCPU {
                    line += String(format: " front CPU %.1f %% of one core;", endCPU.cpuSeconds(since: startCPU) / elapsed * 100)
                }
                if let startDB, let endDB {
                    line += String(format: " database %.1f transactions/s", Double(endDB.transactions - startDB.transactions) / elapsed)
                    if let statements = endDB.statements, let first = startDB.statements {
                        // The two samples' own statements are not the server's.
                        line += String(format: ", %.1f statements/s (pg_stat_statements)", Double(statements - first - 2) / elapsed)
                    }
                }
                print(line)
                var answeredAfter = 0
                for part in parts { answeredAfter += await part.answeredSinceReady().all }
                print("idle connections answered during the window (re-polls, refusals): \(answeredAfter - answeredBefore)")
                try await database?.close()

                // Fan-out: each push must reach every member.
                var latency = Histogram<UInt64>(highestTrackableValue: 600_000_000, numberOfSignificantValueDigits: .three)
                var missing = 0
                // CPU over the rounds (their pauses too), per member answered: the front's, and this
                // process's own (it shares the machine's cores with the front).
                let fanOutFront = frontPID.flatMap(ProcessStats.read)
                let fanOutSelf = ProcessStats.read(getpid())
                for round in 0..<pushes {
                    wakes.reset(expecting: "milk-\(round)")
                    let operation = SyncOperation(idempotencyKey: "\(household)-milk-\(round)", entityType: "inventory", entityID: "milk-\(round)", intent: .create,
                                                  data: ["qty": .int(Int64(round))], clientTimestamp: .now(), householdID: household)
                    let response = try await client.send(.POST, "/v1/sync/push?wait=30000", token: ownerToken, device: "owner", body: JSONValue.object(["operations": [operation.json]]).serialized())
                    let answered = ContinuousClock.now
                    guard response.status == 200 else { throw ValidationError("household push answered \(response.status)") }
                    let arrivals = try await wakes.arrivals(count: members, timeout: .seconds(30))
                    missing += members - arrivals.count
                    for arrival in arrivals { _ = latency.record(UInt64(max(.zero, answered.duration(to: arrival)).microseconds)) }
                    try await eventually(wakes, armed: members, timeout: .seconds(60))
                    try await Task.sleep(for: .milliseconds(200))
                }
                func ms(_ percentile: Double) -> String { String(format: "%.1f", Double(latency.valueAtPercentile(percentile)) / 1000) }
                print("household push → \(members) members' long-polls answered (ms after the push was answered, \(pushes) pushes): p50 \(ms(50))  p90 \(ms(90))  p99 \(ms(99))  max \(String(format: "%.1f", Double(latency.max) / 1000)); missed: \(missing)")
                let answers = Double(max(1, pushes * members))
                if let fanOutFront, let now = frontPID.flatMap(ProcessStats.read), let fanOutSelf, let own = ProcessStats.read(getpid()) {
                    print(String(format: "fan-out CPU per member answered: front %.1f µs, load generator %.1f µs",
                                 now.cpuSeconds(since: fanOutFront) * 1e6 / answers, own.cpuSeconds(since: fanOutSelf) * 1e6 / answers))
                }
                group.cancelAll()
            }
            }
        }

        /// Idle user `i` joins household `i % households`, so idle waiters also watch shared feeds.
        static func createIdleHouseholds(url: String, authority: TokenAuthority, run: String, households: Int, users: Int) async throws {
            let token = try await authority.issue(userID: "idle-\(run)-owner", ttlSeconds: 3600)
            let creates = (0..<households).map { index in
                SyncOperation(idempotencyKey: "idle-\(run)-h\(index)", entityType: "households", entityID: "idle-\(run)-h\(index)", intent: .create, data: ["name": "Idle"], clientTimestamp: .now())
            }
            let joins = (0..<users).map { index in
                SyncOperation(idempotencyKey: "idle-\(run)-j\(index)", entityType: "household_members", entityID: "idle-\(run)-h\(index % households):idle-\(run)-u\(index)",
                              intent: .create, data: ["user_id": .string("idle-\(run)-u\(index)"), "role": "member"], clientTimestamp: .now())
            }
            let all = creates + joins
            try await LiveClient.with(base: url, connections: 4) { client in
                for chunk in stride(from: 0, to: all.count, by: 500) {
                    let body = JSONValue.object(["operations": .array(all[chunk..<min(all.count, chunk + 500)].map(\.json))]).serialized()
                    let response = try await client.send(.POST, "/v1/sync/push?wait=30000", token: token, device: "owner", body: body)
                    guard response.status == 200 else { throw ValidationError("idle households push answered \(response.status): \(String(describing: response.json))") }
                }
            }
        }

        /// A member's device: long-polls its feeds, recording when each change arrives.
        static func member(client: LiveClient, token: String, wait: Int, wakes: WakeTimes) async throws {
            var cursor = ""
            while !Task.isCancelled {
                // Page to the end first: the household joined shows as scopes added.
                let query = cursor.isEmpty ? "" : "cursor=\(cursor)&wait=\(wait)"
                if !cursor.isEmpty { wakes.armed(+1) }
                let response = try await client.send(.GET, "/v1/sync/pull?\(query)", token: token, device: "phone")
                if !cursor.isEmpty { wakes.armed(-1) }
                let received = ContinuousClock.now
                guard response.status == 200, let page = response.json else {
                    try await Task.sleep(for: .seconds(1))
                    continue
                }
                cursor = page["cursor"]?.stringValue ?? cursor
                for change in page["changes"]?.arrayValue ?? [] {
                    if let id = change["entity_id"]?.stringValue { wakes.arrived(id, at: received) }
                }
            }
        }

        func eventually(_ wakes: WakeTimes, armed count: Int, timeout: Duration) async throws {
            let deadline = ContinuousClock.now + timeout
            while wakes.armedCount < count {
                guard ContinuousClock.now < deadline else { throw ValidationError("only \(wakes.armedCount) of \(count) members' long-polls are waiting") }
                try await Task.sleep(for: .milliseconds(20))
            }
        }

        static func seconds(_ duration: Duration) -> Double {
            Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        }
    }

    /// Holds idle long-polls and event streams open (`load live` starts it as a child process).
    /// Prints `ready N` once every connection is open, then `answered ALL QUICK` (answers since,
    /// and those within a second of their request) whenever asked on stdin;
    /// exits when stdin closes.
    struct IdleLoad: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "idle", abstract: "Hold idle live connections open (used by `load live`).", shouldDisplay: false)

        @OptionGroup var target: Target
        @Option var run: String
        @Option var first: Int
        @Option var count: Int
        @Option(help: "Connections below this index are long-polls, the rest event streams") var longPolls: Int
        @Option var users: Int
        @Option var households: Int
        @Option var ttl: Int
        @Option var rampRate = 200
        @Option var wait = 30000

        func run() async throws {
            var limit = rlimit()
            getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
            guard count + 64 <= Int(limit.rlim_cur) else {
                throw ValidationError("\(count) connections need more open files than this process may have (\(limit.rlim_cur)); use more --processes")
            }
            let authority = try await target.authority()
            guard let url = URL(string: target.url), let host = url.host, let port = url.port else { throw ValidationError("--url must be http://HOST:PORT") }
            try await LiveClient.with(base: target.url, connections: 16) { client in
            var requests: [HTTPRequestHead] = []
            for index in first..<(first + count) {
                let user = "idle-\(run)-u\(index % users)"
                let token = try await authority.issue(userID: user, ttlSeconds: ttl)
                var cursor = ""
                if households > 0 {
                    // A cursor past the household's set-up, so the long-poll waits.
                    let page = try await client.send(.GET, "/v1/sync/pull?limit=1000", token: token, device: "d\(index)")
                    cursor = page.json?["cursor"]?.stringValue.map { "&cursor=\($0)" } ?? ""
                }
                let path = index < longPolls ? "/v1/sync/pull?wait=\(wait)\(cursor)" : "/v1/sync/events"
                let headers: HTTPHeaders = ["Host": "\(host):\(port)", "Authorization": "Bearer \(token)", "X-Device-Id": "d\(index)"]
                requests.append(HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers))
            }
            let connections = IdleConnections(host: host, port: port)
            try await withThrowingTaskGroup(of: Void.self) { group in
                // Open at a bounded rate: each connection's first pull costs the server a read.
                let wave = max(1, rampRate / 10)
                for start in stride(from: 0, to: requests.count, by: wave) {
                    let started = ContinuousClock.now
                    let opened = Locked(0)
                    let batch = requests[start..<min(requests.count, start + wave)]
                    for request in batch {
                        group.addTask { try await connections.hold(request, opened: opened) }
                    }
                    while opened.value < batch.count { try await Task.sleep(for: .milliseconds(5)) }
                    let pause = Duration.milliseconds(100) - started.duration(to: .now)
                    if pause > .zero { try await Task.sleep(for: pause) }
                }
                Self.say("ready \(requests.count)")
                connections.resetAnswered()
                // Answer the parent's questions until it closes stdin (read on a thread of its own: it blocks).
                group.addTask {
                    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                        Thread.detachNewThread {
                            while let line = readLine() {
                                if line == "answered" { Self.say("answered \(connections.answered.all) \(connections.answered.quick)") }
                            }
                            continuation.resume()
                        }
                    }
                    throw CancellationError()
                }
                _ = try? await group.next()
                group.cancelAll()
            }
            }
        }

        /// One line to the parent, unbuffered.
        static func say(_ line: String) {
            FileHandle.standardOutput.write(Data((line + "\n").utf8))
        }
    }
}

/// Connections that each send one request and, whenever its answer ends, send it again on the
/// same connection (HTTP/1.1 keep-alive, as a device's HTTP client re-polls); a connection the
/// server closes is reopened.
final class IdleConnections: Sendable {
    let host: String
    let port: Int
    private let counters = Mutex((all: 0, quick: 0))

    init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Answers since the last reset: all of them, and those that came within a second of the request.
    var answered: (all: Int, quick: Int) { counters.withLock { $0 } }
    func resetAnswered() { counters.withLock { $0 = (0, 0) } }
    fileprivate func answeredOne(quick: Bool) { counters.withLock { $0.all += 1; if quick { $0.quick += 1 } } }

    func hold(_ request: HTTPRequestHead, opened: Locked<Int>) async throws {
        var first = true
        while !Task.isCancelled {
            let started = ContinuousClock.now
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.seconds(30))
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        try channel.pipeline.syncOperations.addHandler(Repoll(request: request, connections: self))
                    }
                }
                .connect(host: host, port: port).get()
            if first {
                opened.update { $0 += 1 }
                first = false
            }
            try await withTaskCancellationHandler {
                try await channel.closeFuture.get()
            } onCancel: {
                channel.close(promise: nil)
            }
            // Closed at once (a refusal, an error): do not hammer the server.
            if started.duration(to: .now) < .seconds(1) { try await Task.sleep(for: .seconds(1)) }
        }
    }

    /// Sends the request when the connection opens and again each time its answer ends (a
    /// second later if it ended within a second: a refusal must not become a busy loop).
    private final class Repoll: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = HTTPClientResponsePart
        typealias OutboundOut = HTTPClientRequestPart

        let request: HTTPRequestHead
        let connections: IdleConnections
        private var sent = NIODeadline.now()

        init(request: HTTPRequestHead, connections: IdleConnections) {
            self.request = request
            self.connections = connections
        }

        func channelActive(context: ChannelHandlerContext) {
            send(context: context)
            context.fireChannelActive()
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard case .end = unwrapInboundIn(data) else { return }
            let early = sent + .seconds(1) - .now()
            connections.answeredOne(quick: early > .zero)
            if early > .zero {
                let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
                context.eventLoop.scheduleTask(in: early) {
                    let (handler, context) = loopBound.value
                    handler.send(context: context)
                }
            } else {
                send(context: context)
            }
        }

        private func send(context: ChannelHandlerContext) {
            sent = .now()
            context.write(wrapOutboundOut(.head(request)), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}

/// A child process of `load live` holding idle connections.
final class IdleProcess: @unchecked Sendable {
    let process: Process
    let input: Pipe
    let output: Pipe
    private var buffer = Data()

    static func start(arguments: [String]) throws -> IdleProcess {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        process.arguments = arguments
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        return IdleProcess(process: process, input: input, output: output)
    }

    private init(process: Process, input: Pipe, output: Pipe) {
        self.process = process
        self.input = input
        self.output = output
    }

    /// Blocks until the child prints a line (the children answer within seconds).
    private func line() -> String? {
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                buffer.removeSubrange(buffer.startIndex...newline)
                return line
            }
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { return nil }
            buffer.append(chunk)
        }
    }

    /// The child's next line, read on a thread of its own (the read blocks).
    private func nextLine() async -> String? {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: self.line()) }
        }
    }

    func waitUntilReady() async throws -> Int {
        guard let line = await nextLine(), line.hasPrefix("ready "), let count = Int(line.dropFirst(6)) else {
            throw ValidationError("an idle-connection process stopped before it was ready")
        }
        return count
    }

    /// The idle connections answered since the child was ready: all, and within a second.
    func answeredSinceReady() async -> (all: Int, quick: Int) {
        input.fileHandleForWriting.write(Data("answered\n".utf8))
        let fields = await nextLine()?.split(separator: " ") ?? []
        guard fields.count == 3, fields[0] == "answered", let all = Int(fields[1]), let quick = Int(fields[2]) else { return (0, 0) }
        return (all, quick)
    }

    func stop() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }
}

/// When each member saw the change being measured, and how many members' long-polls wait.
final class WakeTimes: Sendable {
    private struct State {
        var expected = ""
        var arrivals: [ContinuousClock.Instant] = []
        var armed = 0
    }

    private let state = Mutex(State())

    var armedCount: Int { state.withLock { $0.armed } }
    func armed(_ delta: Int) { state.withLock { $0.armed += delta } }

    func reset(expecting id: String) {
        state.withLock {
            $0.expected = id
            $0.arrivals = []
        }
    }

    func arrived(_ id: String, at instant: ContinuousClock.Instant) {
        state.withLock { if $0.expected == id { $0.arrivals.append(instant) } }
    }

    func arrivals(count: Int, timeout: Duration) async throws -> [ContinuousClock.Instant] {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let arrivals = state.withLock { $0.arrivals }
            if arrivals.count >= count { return arrivals }
            try await Task.sleep(for: .milliseconds(5))
        }
        return state.withLock { $0.arrivals }
    }
}

/// CPU time and resident memory of a process, from /proc.
struct ProcessStats {
    var cpuTicks: Int
    var residentBytes: Int

    static func read(_ pid: Int32) -> ProcessStats? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        // Fields after "(comm)": state is field 3; utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
        let rss = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }
            .flatMap { Int($0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") } ?? 0
        return ProcessStats(cpuTicks: user + system, residentBytes: rss * 1024)
    }

    func cpuSeconds(since earlier: ProcessStats) -> Double {
        Double(cpuTicks - earlier.cpuTicks) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}

/// The database's counters: transactions (pg_stat_database) and, when the extension is
/// installed, statements (pg_stat_statements).
final class DatabaseStats: Sendable {
    struct Sample {
        var transactions: Int
        var statements: Int?
    }

    let client: PostgresClient
    let task: Task<Void, Never>

    init(url: String) throws {
        guard case .postgres(let location) = try DatabaseURL(parsing: url) else { throw ValidationError("--stats-url must be a postgres:// URL") }
        let configuration = location.socketDirectory.map {
            PostgresClient.Configuration(unixSocketPath: "\($0)/.s.PGSQL.\(location.port)", username: location.user, password: location.password, database: location.database)
        } ?? PostgresClient.Configuration(host: location.host, port: location.port, username: location.user, password: location.password, database: location.database, tls: .disable)
        client = PostgresClient(configuration: configuration)
        let client = self.client
        task = Task { await client.run() }
    }

    func sample() async throws -> Sample {
        let logger = Logger(label: "syncgate.load")
        // Other backends report to pg_stat_database at most once a second, and an idle one
        // within 10 s: a window of tens of seconds keeps that lag small.
        let transactions = try await integer("SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = current_database()", logger: logger) ?? 0
        let statements = try? await integer(
            "SELECT sum(calls)::bigint FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())", logger: logger
        )
        return Sample(transactions: transactions, statements: statements ?? nil)
    }

    private func integer(_ sql: String, logger: Logger) async throws -> Int? {
        for try await row in try await client.query(PostgresQuery(unsafeSQL: sql), logger: logger) {
            return try row.decode(Int?.self)
        }
        return nil
    }

    func close() async throws {
        task.cancel()
    }
}

/// A JSON-over-HTTP client with as many connections as it has concurrent requests.
final class LiveClient: Sendable {
    let base: String
    let client: HTTPClient

    init(base: String, client: HTTPClient) {
        self.base = base
        self.client = client
    }

    func send(_ method: HTTPMethod, _ path: String, token: String, device: String, body: String? = nil) async throws -> (status: Int, json: JSONValue?) {
        try await LoadClient(base: base, http: client, timeout: .seconds(90)).send(method, path, token: token, device: device, body: body)
    }

    /// Runs `body` with a client, shut down afterwards whatever happens (an HTTP client must be).
    static func with<Result>(base: String, connections: Int, _ body: (LiveClient) async throws -> Result) async throws -> Result {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(idleTimeout: .seconds(120), concurrentHTTP1ConnectionsPerHostSoftLimit: connections)
        return try await HTTPClient.withHTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration) { client in
            try await body(LiveClient(base: base, client: client))
        }
    }
}
