import AsyncHTTPClient
import Foundation
import NIOCore
package import NIOHTTP1
package import PostgresNIO
import SyncGateCore
package import SyncGateWire
package import SyncGateStorage
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A `syncgate` process started by a test (``Spawn``: not Foundation's `Process`).
package final class SyncGateProcess: @unchecked Sendable {
    package let pid: Int32
    package let logPath: String
    /// The exit status once reaped (`waitpid`): the code, or 128 + the signal that ended it.
    private let exit = Mutex<Int32?>(nil)

    /// The binary under test: `SYNCGATE_BINARY` (set by scripts/test) or the debug build.
    package static func binary() throws -> String {
        if let path = ProcessInfo.processInfo.environment["SYNCGATE_BINARY"], !path.isEmpty {
            return path
        }
        let fallback = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(".build/debug/syncgate").path
        guard FileManager.default.isExecutableFile(atPath: fallback) else {
            throw TestEnvironmentError(description: "no syncgate binary: run scripts/test (or set SYNCGATE_BINARY)")
        }
        return fallback
    }

    /// - Parameter replaceEnvironment: use `environment` as the whole environment instead of
    ///   adding it to the test process's.
    package init(executable: String? = nil, _ arguments: [String], environment: [String: String], directory: String? = nil, replaceEnvironment: Bool = false) throws {
        var merged = replaceEnvironment ? [:] : ProcessInfo.processInfo.environment
        merged.merge(environment) { _, new in new }
        logPath = NSTemporaryDirectory() + "syncgate-\(UUID().uuidString).log"
        FileManager.default.createFile(atPath: logPath, contents: nil)
        pid = try Spawn.start(try executable ?? Self.binary(), arguments, environment: merged, directory: directory, output: logPath)
    }

    /// Runs a shell script (`bash`) with exactly `environment`, its output in ``log``.
    package static func shell(_ script: String, in directory: String, environment: [String: String]) throws -> SyncGateProcess {
        try SyncGateProcess(executable: "/bin/bash", [script], environment: environment, directory: directory, replaceEnvironment: true)
    }

    /// Runs one of the repository's scripts, niced (it shares two cores with timing-bound
    /// tests), and returns its exit status and output. The exit is read from a status file the
    /// shell writes, not from Foundation's process monitor: that waits for EOF on a descriptor,
    /// and a server another test starts at the same moment can inherit it for its whole life.
    package static func script(_ path: String, _ arguments: [String], environment: [String: String] = [:], timeout: Duration) async throws -> (status: String, log: String) {
        let stem = NSTemporaryDirectory() + "syncgate-script-\(UUID().uuidString.prefix(8))"
        let output = stem + ".out", statusFile = stem + ".status"
        defer { for file in [output, statusFile] { try? FileManager.default.removeItem(atPath: file) } }
        var environment = environment
        environment["SYNCGATE_BINARY"] = try binary()
        environment["OUTPUT"] = output
        environment["STATUS"] = statusFile
        let shell = try SyncGateProcess(
            executable: "/bin/bash", ["-c", #"nice -n 15 "$0" "$@" >"$OUTPUT" 2>&1; echo $? >"$STATUS""#, path] + arguments, environment: environment
        )
        var status: String?
        try await eventually("\(path) \(arguments.joined(separator: " "))", timeout: timeout, every: .milliseconds(200)) {
            status = try? String(contentsOfFile: statusFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            return status?.isEmpty == false
        }
        withExtendedLifetime(shell) {}
        return (status ?? "", (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
    }

    deinit {
        // Never leak a server or worker past its test, nor its log, nor a zombie.
        if isRunning {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        }
        try? FileManager.default.removeItem(atPath: logPath)
    }

    /// Whether it has not exited; reaps it (once) when it has.
    package var isRunning: Bool {
        exit.withLock { exit in
            guard exit == nil else { return false }
            var status: Int32 = 0
            let reaped = waitpid(pid, &status, WNOHANG)
            guard reaped == pid else { return reaped == 0 }
            exit = Spawn.exitCode(status)
            return false
        }
    }

    package var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    package func signal(_ number: Int32) {
        if isRunning { kill(pid, number) }
    }

    /// Waits for the process to exit; returns its status (the exit code, or 128 + the signal that
    /// ended it), or nil on timeout.
    package func waitForExit(timeout: Duration) async -> Int32? {
        let deadline = ContinuousClock.now + timeout
        while isRunning {
            if ContinuousClock.now > deadline { return nil }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return exit.withLock { $0 }
    }

    package func stop() async {
        guard isRunning else { return }
        signal(SIGKILL)
        _ = await waitForExit(timeout: .seconds(5))
    }

    /// A free TCP port on 127.0.0.1 for a server a test starts, never the same one twice in a
    /// test process. Taken below the kernel's ephemeral range (`ip_local_port_range`, from 32768
    /// by default): a port that `bind` to port 0 handed out, once closed, can be handed out again
    /// — to another test's `bind`, or as the local port of any outgoing connection — before the
    /// server binds it, which then exits with "Address already in use" (seen once in a full run,
    /// in EmbeddedModeTests). Below that range only these picks choose ports, and they check each;
    /// the scripts' own picks (`scripts/free-port`, used by `scripts/cluster` while tests run)
    /// take 20,000 and up, so the two never choose the same port before either binds it.
    package static func freePort() -> Int {
        for _ in 0..<1_000 {
            let port = Int.random(in: serverPorts)
            guard handedOut.withLock({ $0.insert(port).inserted }) else { continue }
            if canBind(port) { return port }
        }
        fatalError("no free port in \(serverPorts) after 1,000 tries")
    }

    /// Where ``freePort()`` picks: from 10,000 to 19,999, below the ephemeral range and below
    /// the scripts' picks.
    private static let serverPorts: Range<Int> = 10_000..<20_000

    private static let handedOut = Mutex<Set<Int>>([])

    /// Whether a listening socket could bind `port` on 127.0.0.1 now.
    private static func canBind(_ port: Int) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}

/// A tiny HTTP client for process tests.
package struct ProcessClient: Sendable {
    package let base: String

    package init(base: String) {
        self.base = base
    }

    package func request(
        _ method: HTTPMethod, _ path: String, token: String? = nil, device: String? = "d1", body: String? = nil, headers: [(String, String)] = [],
        timeout: Duration = hangGuard
    ) async throws -> (status: Int, json: JSONValue?) {
        let (status, bytes) = try await raw(method, path, token: token, device: device, body: body, headers: headers, timeout: timeout)
        return (status, try? JSONParser().parse(Array(bytes.readableBytesView)))
    }

    /// A GET's body as text (`/metrics`).
    package func text(_ path: String) async throws -> String {
        let (status, bytes) = try await raw(.GET, path, token: nil, device: nil, body: nil, headers: [], timeout: hangGuard)
        guard status == 200 else { throw TestEnvironmentError(description: "GET \(path) answered \(status)") }
        return String(buffer: bytes)
    }

    private func raw(
        _ method: HTTPMethod, _ path: String, token: String?, device: String?, body: String?, headers: [(String, String)], timeout: Duration
    ) async throws -> (Int, ByteBuffer) {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        request.headers.add(contentsOf: headers)
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let device { request.headers.add(name: "X-Device-Id", value: device) }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(Int64(timeout.components.seconds)))
        return (Int(response.status.code), try await response.body.collect(upTo: 16 * 1024 * 1024))
    }

    /// Polls `/readyz` until it answers 200.
    package func waitUntilReady(_ process: SyncGateProcess, timeout: Duration = hangGuard) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            guard process.isRunning else { throw TestEnvironmentError(description: "syncgate exited: \(process.log)") }
            if let response = try? await request(.GET, "/readyz", device: nil, timeout: .seconds(10)), response.status == 200 { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw TestEnvironmentError(description: "syncgate did not become ready: \(process.log)")
    }

    package static func pushBody(_ operations: [SyncOperation]) -> String {
        JSONValue.object(["operations": .array(operations.map(\.json))]).serialized()
    }
}

extension DatabaseURL.PostgresLocation {
    package var urlString: String { "postgres://\(user)@\(host):\(port)/\(database)" }
}

/// A plain connection for tests that hold locks or inspect tables.
package func withConnection<Result: Sendable>(_ location: DatabaseURL.PostgresLocation, _ body: (PostgresConnection) async throws -> Result) async throws -> Result {
    let configuration = location.socketDirectory.map {
        PostgresConnection.Configuration(unixSocketPath: "\($0)/.s.PGSQL.\(location.port)", username: location.user, password: location.password, database: location.database)
    } ?? PostgresConnection.Configuration(
        host: location.host, port: location.port, username: location.user, password: location.password, database: location.database, tls: .disable
    )
    let connection = try await PostgresConnection.connect(configuration: configuration, id: Int.random(in: 1...1_000_000), logger: TestDatabases.logger)
    do {
        let result = try await body(connection)
        try? await connection.close()
        return result
    } catch {
        try? await connection.close()
        throw error
    }
}

extension PostgresConnection {
    /// The first column of the first row, as an integer.
    package func integer(_ sql: String) async throws -> Int {
        for try await row in try await query(PostgresQuery(unsafeSQL: sql), logger: TestDatabases.logger) {
            return try row.decode(Int.self)
        }
        return 0
    }
}
