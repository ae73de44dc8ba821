import ArgumentParser
import NIOCore
import NIOPosix
import SyncGateServer

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

/// A command whose Swift concurrency jobs run on NIO's event loops
/// (`MultiThreadedEventLoopGroup.singleton`, which PostgresNIO and AsyncHTTPClient use) instead of
/// the concurrency runtime's own thread pool: a task that awaits a database answer or a socket
/// then resumes on the thread that read it, instead of waking a second thread. The price: code
/// that blocks a thread blocks an event loop — these commands' code does not block.
///
/// Measured (docs/performance-log.md, step 10): the write-path load generator's CPU per push fell by
/// a quarter and the worker's by a tenth; `serve` does not adopt it: with 16,000 idle connections
/// its CPU rose from 9.6 % to 10.6–10.7 % of a core, and `load live` measured a household's fan-out
/// p50 of 62–64 ms instead of 39–45.
///
/// NIO installs the hook through `dlsym`, so only where the Swift runtime is a shared library: in a
/// binary built with `--static-swift-stdlib` (`deploy/Dockerfile`, `scripts/bench`) the runtime's
/// hook is a local symbol and these commands run on the runtime's pool like the others. Measured
/// there, a task executor preference that keeps the command's tasks on the event loops in any build
/// made no difference (same-run A/B at saturation, 4 rounds, each build loaded by its own load
/// generator: B/A 0.975), so the static build goes without it.
///
/// `SendableMetatype`: no conformance to it is isolated to an actor, so `main` may ask a parsed
/// command for it on the main thread and then hand the command to its nonisolated `run`.
protocol RunsOnEventLoops: SendableMetatype {}
