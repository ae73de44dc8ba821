import Foundation
package import SyncGateStorage

/// A durable Citus cluster of a test's own (`scripts/citus start`: a coordinator and two
/// workers, fsync on), for the crash test on Citus, which stops its nodes; with one database,
/// `syncgate`, distributed by sql/citus/distribute.sql.
package final class TemporaryCitus: @unchecked Sendable {
    package let directory: String
    package let location: DatabaseURL.PostgresLocation
    package let workers: [(host: String, port: Int)]
    let bin = ProcessInfo.processInfo.environment["SYNCGATE_TEST_PG_BIN"] ?? "/usr/lib/postgresql/15/bin"

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    package static func make() async throws -> TemporaryCitus {
        let directory = NSTemporaryDirectory() + "syncgate-citus-crash-\(UUID().uuidString.prefix(8))"
        try await TemporaryPostgres.offThePool { try TemporaryPostgres.run("/bin/bash", ["\(root)/scripts/citus", "start", "--dir", directory]) }
        let cluster = try TemporaryCitus(directory: directory)
        try await TestDatabases.makeCitusDatabase(cluster.location, workers: cluster.workers, migrated: true)
        return cluster
    }

    private init(directory: String) throws {
        self.directory = directory
        var values: [String: String] = [:]
        for line in try String(contentsOfFile: "\(directory)/env", encoding: .utf8).split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { values[parts[0]] = parts[1] }
        }
        guard let url = values["SYNCGATE_DATABASE_URL"], case .postgres(var location) = try DatabaseURL(parsing: url) else {
            throw TestEnvironmentError(description: "scripts/citus start wrote no database URL in \(directory)/env")
        }
        location.database = "syncgate"
        self.location = location
        workers = (values["SYNCGATE_CITUS_WORKERS"] ?? "").split(separator: ",").compactMap { item in
            let parts = item.split(separator: ":")
            guard parts.count == 2, let port = Int(parts[1]) else { return nil }
            return (String(parts[0]), port)
        }
    }

    /// The nodes a crash round stops at once (`-m immediate`: recovery from the WAL at the next
    /// start): the coordinator alone (the workers keep its prepared transactions), a worker alone,
    /// then all of them; started again workers first.
    package func crash(round: Int) async throws -> String {
        let nodes = switch round % 3 {
        case 1: ["coordinator"]
        case 2: ["worker-1"]
        default: ["worker-1", "worker-2", "coordinator"]
        }
        try await TemporaryPostgres.offThePool {
            for node in nodes {
                try TemporaryPostgres.runAsPostgres("\(self.bin)/pg_ctl", ["-D", "\(self.directory)/\(node)", "-m", "immediate", "-w", "stop"])
            }
            for node in nodes {
                try TemporaryPostgres.runAsPostgres(
                    "\(self.bin)/pg_ctl", ["-D", "\(self.directory)/\(node)", "-l", "\(self.directory)/\(node).log", "-w", "-t", "60", "start"]
                )
            }
        }
        return nodes.joined(separator: ", ")
    }

    /// Stops every node and removes the cluster's folder, on a thread of its own (awaited at exit).
    package func destroyInBackground() {
        TemporaryPostgres.beforeExit { try? TemporaryPostgres.run("/bin/bash", ["\(Self.root)/scripts/citus", "stop", self.directory]) }
    }
}
