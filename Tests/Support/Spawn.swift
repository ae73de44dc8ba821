import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Starts programs with `posix_spawn`, never Foundation's `Process`: on Linux its `run()`
/// over-reads a `dirent` while listing the descriptors to close and, now and then, crashes the
/// whole test process with SIGSEGV (swift-corelibs-foundation#5472, in Swift 6.3.1; seen in a
/// full run under load, spawning a crash-test worker).
package enum Spawn {
    /// Starts `executable` with `arguments` and exactly `environment`, in `directory` (or this
    /// process's), its standard output and error appended to the file `output`; returns its pid.
    /// Descriptors of this process other than 0–2 are closed in the child.
    package static func start(
        _ executable: String, _ arguments: [String], environment: [String: String], directory: String? = nil, output: String
    ) throws -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // glibc's (2.34+) non-portable actions, which Swift's Glibc module does not declare.
        if let closeFrom = Self.closeFrom { _ = closeFrom(&actions, 3) }
        if let directory {
            guard let changeDirectory = Self.changeDirectory else { throw TestEnvironmentError(description: "this C library cannot spawn in a directory") }
            _ = changeDirectory(&actions, directory)
        }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { envp.forEach { free($0) } }
        var pid = pid_t()
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, envp)
        guard spawned == 0 else { throw TestEnvironmentError(description: "cannot start \(executable): error \(spawned)") }
        return pid
    }

    typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    typealias ChangeDirectory = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
    nonisolated(unsafe) static let closeFrom = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np").map { unsafeBitCast($0, to: CloseFrom.self) }
    nonisolated(unsafe) static let changeDirectory = dlsym(nil, "posix_spawn_file_actions_addchdir_np").map { unsafeBitCast($0, to: ChangeDirectory.self) }

    /// Runs `executable` to completion; its exit status and output.
    package static func run(_ executable: String, _ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment) throws -> (status: Int32, output: String) {
        let output = NSTemporaryDirectory() + "syncgate-spawn-\(UUID().uuidString).out"
        defer { try? FileManager.default.removeItem(atPath: output) }
        let pid = try start(executable, arguments, environment: environment, output: output)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        return (exitCode(status), (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
    }

    /// The exit code of a `waitpid` status, or 128 + the signal that ended the process.
    package static func exitCode(_ status: Int32) -> Int32 {
        (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}
