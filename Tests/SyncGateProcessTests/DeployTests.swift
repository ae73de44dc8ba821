import Foundation
import SyncGatePostgres
import SyncGateStorage
import SyncGateTestSupport
import Testing
import Yams

/// The manifests in `deploy/` cannot be run here (no container engine), so check what can go
/// stale without one: every file parses, every command they run is a real `syncgate` command
/// with real flags, every setting they pass is documented, and the image copies files that exist.
@Suite(.timeLimit(.minutes(2))) struct DeployTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func text(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    static var manifestPaths: [String] {
        let kubernetes = (try? FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("deploy/kubernetes").path)) ?? []
        return ["deploy/docker-compose.yml"] + kubernetes.filter { $0.hasSuffix(".yaml") }.sorted().map { "deploy/kubernetes/" + $0 }
    }

    /// Every node of a parsed YAML document, depth first.
    static func nodes(_ value: Any) -> [Any] {
        switch value {
        case let map as [String: Any]: [value] + map.values.flatMap(nodes)
        case let list as [Any]: [value] + list.flatMap(nodes)
        default: [value]
        }
    }

    /// The argument lists given to the `syncgate` image: compose `command`s and Kubernetes `args`.
    static func commands(in document: Any) -> [[String]] {
        nodes(document).compactMap { node in
            guard let map = node as? [String: Any] else { return nil }
            return (map["command"] ?? map["args"]) as? [String]
        }
    }

    /// `SYNCGATE_…` names a manifest sets.
    static func settings(in document: Any) -> Set<String> {
        var names = Set<String>()
        for node in nodes(document) {
            if let map = node as? [String: Any], let name = map["name"] as? String, name.hasPrefix("SYNCGATE_") { names.insert(name) }
            if let map = node as? [String: Any], let environment = map["environment"] as? [String: Any] {
                names.formUnion(environment.keys.filter { $0.hasPrefix("SYNCGATE_") })
            }
        }
        return names
    }

    @Test func manifestsParseAndRunRealCommandsWithDocumentedSettings() async throws {
        #expect(Self.manifestPaths.count >= 6)
        let readme = try Self.text("README.md")
        var commands: [[String]] = []
        var settings = Set<String>()
        for path in Self.manifestPaths {
            let documents = try Array(Yams.load_all(yaml: try Self.text(path))).compactMap { $0 }
            #expect(!documents.isEmpty, "\(path) is empty")
            for document in documents {
                commands += Self.commands(in: document)
                settings.formUnion(Self.settings(in: document))
            }
        }
        #expect(Set(commands.compactMap(\.first)) == ["migrate", "serve", "worker"])
        for command in commands {
            let help = try await Self.help(command[0])
            for flag in command.dropFirst() where flag.hasPrefix("--") {
                #expect(help.contains("[\(flag) "), "`syncgate \(command[0])` has no \(flag)")
            }
        }
        #expect(settings.isSuperset(of: ["SYNCGATE_DATABASE_URL", "SYNCGATE_JWT_SECRET"]))
        for name in settings {
            #expect(readme.contains("`\(name)`"), "\(name) is not in the README's configuration table")
        }
    }

    /// A probe that gives up before the server's own database deadline (5 s) fails a front that
    /// was about to answer; every HTTP probe waits longer than that deadline for /readyz.
    @Test func probesWaitLongerThanTheDatabaseDeadline() throws {
        let deadline = PostgresDriver.Configuration.defaultRequestTimeout
        var probes = 0
        for path in Self.manifestPaths {
            for document in try Array(Yams.load_all(yaml: try Self.text(path))).compactMap({ $0 }) {
                for node in Self.nodes(document) {
                    guard let probe = (node as? [String: Any])?["readinessProbe"] as? [String: Any] else { continue }
                    probes += 1
                    let timeout = try #require(probe["timeoutSeconds"] as? Int, "\(path): readinessProbe has no timeoutSeconds (Kubernetes' default is 1 s)")
                    #expect(Duration.seconds(timeout) > deadline, "\(path): readinessProbe timeoutSeconds \(timeout) ≤ the database deadline \(deadline)")
                }
            }
        }
        #expect(probes > 0)
    }

    @Test func theImageCopiesWhatExistsAndEmbedsItsResources() throws {
        let dockerfile = try Self.text("deploy/Dockerfile")
        let copies = dockerfile.split(separator: "\n").filter { $0.hasPrefix("COPY ") && !$0.contains("--from=") }
        #expect(!copies.isEmpty)
        for line in copies {
            let source = String(line.split(separator: " ")[1])
            #expect(FileManager.default.fileExists(atPath: Self.root.appendingPathComponent(source).path), "COPY \(source)")
        }
        #expect(dockerfile.contains("--product syncgate"))
        #expect(dockerfile.contains("ENTRYPOINT [\"/usr/local/bin/syncgate\"]"))
    }

    /// The Grafana dashboard charts every series SyncGate exports and no other; the README lists
    /// them all; the Prometheus configuration parses and scrapes the annotated pods.
    @Test func theDashboardAndTheREADMENameExactlyTheExportedSeries() throws {
        let dashboard = try #require(try JSONSerialization.jsonObject(with: Data(Self.text("deploy/grafana/syncgate-dashboard.json").utf8)) as? [String: Any])
        let panels = try #require(dashboard["panels"] as? [[String: Any]])
        let expressions = panels.flatMap { ($0["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
        #expect(expressions.count >= panels.count)
        var charted = Set<String>()
        for expression in expressions {
            for match in expression.matches(of: /syncgate_[a-z_]+/) {
                var name = String(match.output)
                for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) { name.removeLast(suffix.count) }
                charted.insert(name)
            }
        }
        #expect(charted == Set(MetricName.all), "charted but not exported: \(charted.subtracting(MetricName.all)); exported but not charted: \(Set(MetricName.all).subtracting(charted))")
        let readme = try Self.text("README.md")
        for name in MetricName.all { #expect(readme.contains("`\(name)`"), "\(name) is not in the README") }

        let prometheus = try #require(try Yams.load(yaml: Self.text("deploy/prometheus/prometheus.yml")) as? [String: Any])
        let jobs = try #require(prometheus["scrape_configs"] as? [[String: Any]])
        #expect(jobs.contains { $0["kubernetes_sd_configs"] != nil })
        // The pods it keeps are the ones the manifests annotate.
        for path in ["deploy/kubernetes/front.yaml", "deploy/kubernetes/worker.yaml"] {
            #expect(try Self.text(path).contains("prometheus.io/scrape: \"true\""), "\(path) is not annotated for scraping")
        }
    }

    /// `syncgate help <command>` from the binary under test.
    static func help(_ command: String) async throws -> String {
        let process = try SyncGateProcess(["help", command], environment: [:])
        guard await process.waitForExit(timeout: .seconds(30)) == 0 else {
            throw TestEnvironmentError(description: "`syncgate help \(command)` failed: \(process.log)")
        }
        return process.log
    }
}
