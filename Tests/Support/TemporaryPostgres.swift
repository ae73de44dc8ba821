import Foundation
package import SyncGateStorage

#if canImport(Glibc)
import Glibc
#endif
import SyncGateConcurrency

/// A PostgreSQL server of a test's own, for tests that stop and restart the database.
/// Uses the binaries at `SYNCGATE_TEST_PG_BIN` (default /usr/lib/postgresql/15/bin); as root it
/// runs them as the `postgres` user, because PostgreSQL refuses to run as root.
package final class TemporaryPostgres: @unchecked Sendable {
    package let directory: String
    package let port: Int
    package let bin: String

    package var location: DatabaseURL.PostgresLocation {
        DatabaseURL.PostgresLocation(host: "127.0.0.1", port: port, user: "postgres", password: nil, database: "postgres", tlsMode: "disable", socketDirectory: nil)
    }

    /// The server over its Unix socket (never TLS).
    package var socketLocation: DatabaseURL.PostgresLocation {
        DatabaseURL.PostgresLocation(host: "", port: port, user: "postgres", database: "postgres", socketDirectory: directory)
    }

    /// The self-signed certificate of a server made with `tls: true` (for `sslrootcert`).
    package var certificatePath: String { "\(directory)/server.crt" }

    /// Creates and starts a server; initdb and pg_ctl run off Swift's cooperative pool, whose
    /// two threads on a CI machine every other test in the process shares.
    /// - Parameters:
    ///   - durable: keep PostgreSQL's durable defaults (fsync, synchronous commit, full page
    ///     writes), for crash tests; otherwise fsync is off, for speed.
    ///   - tls: serve TLS with a self-signed certificate for `localhost`, and refuse TCP clients
    ///     that do not use it (the Unix socket stays open without TLS).
    package static func make(durable: Bool = false, tls: Bool = false) async throws -> TemporaryPostgres {
        try await built { try TemporaryPostgres(durable: durable, tls: tls) }
    }

    /// A server made by `build` on a thread of its own (initdb, pg_basebackup and pg_ctl block).
    private static func built(_ build: @escaping @Sendable () throws -> TemporaryPostgres) async throws -> TemporaryPostgres {
        let made = Locked<TemporaryPostgres?>(nil)
        try await offThePool {
            let server = try build()
            made.update { $0 = server }
        }
        return made.value!
    }

    /// A new folder for a server's data, socket and log, which the server's user may enter.
    private static func makeFolder(_ prefix: String) throws -> String {
        let directory = NSTemporaryDirectory() + "\(prefix)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o711])
        if getuid() == 0 { try Self.run("/bin/chown", ["postgres", directory]) }
        return directory
    }

    /// Appends `settings` to the server's postgresql.conf (the last setting of a name wins).
    private func appendToConfiguration(_ settings: String) throws {
        let configuration = "\(directory)/data/postgresql.conf"
        try (try String(contentsOfFile: configuration, encoding: .utf8) + settings).write(toFile: configuration, atomically: false, encoding: .utf8)
    }

    private init(durable: Bool, tls: Bool) throws {
        bin = ProcessInfo.processInfo.environment["SYNCGATE_TEST_PG_BIN"] ?? "/usr/lib/postgresql/15/bin"
        directory = try Self.makeFolder("syncgate-outage")
        port = SyncGateProcess.freePort()
        try runAsPostgres("\(bin)/initdb", ["-D", "\(directory)/data", "--auth=trust", "--username=postgres", "--no-locale", "--encoding=UTF8"])
        var settings = "\nlisten_addresses = '127.0.0.1'\nport = \(port)\nunix_socket_directories = '\(directory)'\n" + (durable ? "" : "fsync = off\n")
        if tls {
            let key = "\(directory)/server.key"
            try Self.run("/usr/bin/openssl", [
                "req", "-new", "-x509", "-days", "2", "-nodes", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                "-keyout", key, "-out", certificatePath,
            ])
            try Self.run("/bin/chmod", ["600", key])
            if getuid() == 0 { try Self.run("/bin/chown", ["postgres", key, certificatePath]) }
            settings += "ssl = on\nssl_cert_file = '\(certificatePath)'\nssl_key_file = '\(key)'\n"
            let rules = "\(directory)/data/pg_hba.conf"
            let refuseClearText = "hostnossl all all 0.0.0.0/0 reject\nhostnossl all all ::/0 reject\n"
            try (refuseClearText + (try String(contentsOfFile: rules, encoding: .utf8))).write(toFile: rules, atomically: false, encoding: .utf8)
        }
        try appendToConfiguration(settings)
        try startNow()
    }

    /// A hot standby of this server: `pg_basebackup -R` (streaming replication, `standby.signal`
    /// and `primary_conninfo` written for it), on a port and in a folder of its own, started.
    package func makeStandby() async throws -> TemporaryPostgres {
        try await Self.built { try TemporaryPostgres(standbyOf: self) }
    }

    private init(standbyOf primary: TemporaryPostgres) throws {
        bin = primary.bin
        directory = try Self.makeFolder("syncgate-standby")
        port = SyncGateProcess.freePort()
        try runAsPostgres("\(bin)/pg_basebackup", [
            "-D", "\(directory)/data", "-h", "127.0.0.1", "-p", "\(primary.port)", "-U", "postgres", "-R", "-X", "stream", "-c", "fast",
        ])
        // The copied configuration names the primary's port and folder.
        try appendToConfiguration("\nport = \(port)\nunix_socket_directories = '\(directory)'\nhot_standby = on\n")
        try startNow()
    }

    package func start() async throws {
        try await Self.offThePool { try self.startNow() }
    }

    private func startNow() throws {
        try runAsPostgres("\(bin)/pg_ctl", ["-D", "\(directory)/data", "-l", "\(directory)/server.log", "-w", "-t", "60", "start"])
    }

    /// A fast shutdown: connected sessions are terminated, as in a crash or failover.
    /// `immediate`: no shutdown checkpoint at all, recovery from the WAL at the next start — what
    /// a power cut or `kill -9` of the postmaster leaves.
    package func stop(immediate: Bool = false) async throws {
        let mode = immediate ? "immediate" : "fast"
        try await Self.offThePool { try self.runAsPostgres("\(self.bin)/pg_ctl", ["-D", "\(self.directory)/data", "-m", mode, "-w", "stop"]) }
    }

    /// Runs a blocking call on a thread of its own, never on Swift's cooperative pool.
    package static func offThePool(_ body: @escaping @Sendable () throws -> Void) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            Thread.detachNewThread {
                do {
                    try body()
                    continuation.resume()
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    /// Stops the server at once and removes its folder, on a thread of its own. The test process
    /// waits for these at exit: a filtered run that ends right after its test used to leave the
    /// server running.
    package func destroyInBackground() {
        Self.beforeExit { self.destroy() }
    }

    /// Runs `body` on a thread of its own; the test process waits for it at exit (30 s at most).
    package static func beforeExit(_ body: @escaping @Sendable () -> Void) {
        _ = Self.waitForDestroysAtExit
        Self.destroying.enter()
        Thread.detachNewThread {
            body()
            Self.destroying.leave()
        }
    }

    private static let destroying = DispatchGroup()
    private static let waitForDestroysAtExit: Void = {
        atexit { _ = TemporaryPostgres.destroying.wait(timeout: .now() + 30) }
    }()

    package func destroy() {
        try? runAsPostgres("\(bin)/pg_ctl", ["-D", "\(directory)/data", "-m", "immediate", "stop"])
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func runAsPostgres(_ executable: String, _ arguments: [String]) throws {
        try Self.runAsPostgres(executable, arguments)
    }

    /// Runs a command as the `postgres` user when the tests run as root (PostgreSQL refuses root).
    package static func runAsPostgres(_ executable: String, _ arguments: [String]) throws {
        if getuid() == 0 {
            try Self.run("/usr/sbin/runuser", ["-u", "postgres", "--", executable] + arguments)
        } else {
            try Self.run(executable, arguments)
        }
    }

    /// Runs a command to completion with `posix_spawn` and `waitpid`. (Foundation's `Process`
    /// misses the exit of `runuser … pg_ctl start`, whose grandchild daemonizes.) Output goes to a
    /// file, not a pipe, because the server keeps the inherited descriptors.
    package static func run(_ executable: String, _ arguments: [String]) throws {
        let outputPath = NSTemporaryDirectory() + "syncgate-cmd-\(UUID().uuidString).log"
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid = pid_t()
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        guard spawned == 0 else { throw TestEnvironmentError(description: "cannot start \(executable): error \(spawned)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let exitedCleanly = (status & 0x7f) == 0 && ((status >> 8) & 0xff) == 0
        guard exitedCleanly else {
            let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
            throw TestEnvironmentError(description: "\(executable) \(arguments.joined(separator: " ")) failed (status \(status)): \(text)")
        }
    }
}
