import Foundation
import NIOCore
import PostgresNIO
@testable import SyncGatePostgres
import SyncGateTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What a failed connection of the listener says about the database: refused means away (every
/// request then answers `503` at once), while a connection that took too long to open is a busy
/// or distant server's, which the request deadline already bounds. (A suite once failed three
/// tests with "the database refuses connections" against a server that was up.)
@Suite(.timeLimit(.minutes(10))) struct ListenerVerdictTests {
    static func connect(port: Int) async -> PSQLError? {
        var configuration = PostgresConnection.Configuration(host: "127.0.0.1", port: port, username: "postgres", password: nil, database: "postgres", tls: .disable)
        configuration.options.connectTimeout = .milliseconds(300)
        do {
            let connection = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: TestDatabases.logger)
            try? await connection.close()
            return nil
        } catch {
            return error as? PSQLError
        }
    }

    @Test func aRefusedConnectionShowsTheDatabaseAway() async throws {
        // Nothing listens on a port freePort hands out until a server binds it.
        let failure = try #require(await Self.connect(port: SyncGateProcess.freePort()))
        #expect(PostgresDriver.showsTheDatabaseAway(failure), "\(failure.code) \(String(describing: failure.underlying))")
    }

    @Test func aConnectionThatTimesOutDoesNotShowTheDatabaseAway() async throws {
        // A socket that listens and never answers: TCP connects (the kernel accepts into the
        // backlog), the startup message waits for an answer until the connect deadline.
        let port = SyncGateProcess.freePort()
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        try #require(bound == 0 && listen(descriptor, 8) == 0)

        let failure = try #require(await Self.connect(port: port))
        #expect(PostgresDriver.isConnectionFailure(failure), "a timeout is a connection failure for the request that met it")
        #expect(!PostgresDriver.showsTheDatabaseAway(failure), "\(failure.code) \(String(describing: failure.underlying))")
    }
}
