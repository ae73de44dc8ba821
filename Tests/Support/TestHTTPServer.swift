package import Hummingbird
package import HummingbirdCore
import Logging
import NIOCore
import Synchronization
package import ServiceLifecycle

/// Runs `router` on 127.0.0.1 at a free port for the duration of `body` (the stand-ins for
/// services SyncGate calls: an identity provider's JWKS, an OpenTelemetry collector).
package func withTestHTTPServer<Result: Sendable>(
    _ router: Router<BasicRequestContext>, server: HTTPServerBuilder = .http1(), _ body: @Sendable (_ port: Int) async throws -> Result
) async throws -> Result {
    let port = Mutex<Int?>(nil)
    var logger = Logger(label: "test-http-server")
    logger.logLevel = .critical
    let app = Application(
        router: router, server: server, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
        onServerRunning: { channel in port.withLock { $0 = channel.localAddress?.port } }, logger: logger
    )
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await app.run() }
        defer { group.cancelAll() }
        try await eventually("the test server listens", every: .milliseconds(10)) { port.withLock { $0 } != nil }
        return try await body(port.withLock { $0 }!)
    }
}

/// Runs `service` (a worker process's webhook sender or nudger) while `body` runs; cancels it after.
package func whileRunning<Result: Sendable>(_ service: some Service & Sendable, _ body: () async throws -> Result) async throws -> Result {
    let task = Task { try await service.run() }
    defer { task.cancel() }
    let result = try await body()
    task.cancel()
    _ = await task.result
    return result
}
