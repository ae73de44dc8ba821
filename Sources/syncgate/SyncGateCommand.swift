import ArgumentParser

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
}
