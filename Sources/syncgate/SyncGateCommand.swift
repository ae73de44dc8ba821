import ArgumentParser
import SyncGateCommandLine
import NIOCore
import NIOPosix
import SyncGateServer
import SyncGateLoad

@main
struct SyncGateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "syncgate",
        abstract: "The server for offline-first sync: batched pushes, conflict policies, change feeds.",
        discussion: """
            Every option also reads a SYNCGATE_* environment variable (the flag wins). With no
            database URL, SyncGate keeps its data in a SQLite file under ./data.
            """,
        version: "syncgate \(SyncGateVersion.current)",
        subcommands: [
            ServeCommand.self, WorkerCommand.self, MigrateCommand.self, TokenCommand.self, AdminCommand.self, LoadCommand.self,
        ]
    )

    /// Parses, then runs the command — in a ``RunsOnEventLoops`` command's process, with Swift
    /// concurrency's jobs on NIO's event loops, installed from the main thread before any job runs,
    /// once, as NIO asks. (ArgumentParser's own `main`, with that one step added.)
    static func main() async {
        let command: any ParsableCommand
        do {
            command = try parseAsRoot()
        } catch {
            exit(withError: error)
        }
        if command is any RunsOnEventLoops {
            NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        }
        await run(command)
    }

    private static func run(_ command: sending any ParsableCommand) async {
        var command = command
        do {
            if var asynchronous = command as? any AsyncParsableCommand {
                try await asynchronous.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}
