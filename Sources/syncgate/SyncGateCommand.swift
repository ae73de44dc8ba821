import ArgumentParser
import NIOCore
import NIOPosix

@main
struct SyncGateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "syncgate",
        abstract: "The server for offline-first sync: batched pushes, conflict policies, change feeds.",
        discussion: """
            Every option also reads a SYNCGATE_* environment variable (the flag wins). With no
            database URL, SyncGate keeps its data in a SQLite file under ./data.
            """,
        subcommands: [
            ServeCommand.self, WorkerCommand.self, MigrateCommand.self, TokenCommand.self, AdminCommand.self, LoadCommand.self,
        ]
    )

    /// Swift concurrency's jobs run on NIO's event loops (`MultiThreadedEventLoopGroup.singleton`,
    /// which the HTTP server, PostgresNIO and AsyncHTTPClient use) instead of a thread pool of
    /// their own: a task that awaits a database answer or a socket no longer wakes one thread to
    /// hand its continuation to another. On this machine's two cores a front, a worker and the load
    /// generator each ran four busy threads before, two now; same-run A/B at saturation: B/A 1.07
    /// (README, Performance, step 10). Installed first, from the main thread, once, as NIO asks.
    /// The price: code that blocks a thread now blocks an event loop — SyncGate's async code does
    /// not block (SQLite's work runs on GRDB's own queues).
    static func main() async {
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        await Self.main(nil)
    }
}
