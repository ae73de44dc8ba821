import Foundation
import SyncGatePostgres
import SyncGateServer
import SyncGateStorage
import SyncGateTestSupport
import Testing
import Yams

#if canImport(Glibc)
import Glibc
#endif

/// The manifests in `deploy/` cannot be run here (no container engine), so check what can go
/// stale without one: every file parses, every command they run is a real `syncgate` command
/// with real flags, every setting they pass is documented, and the image copies files that exist.
@Suite(.timeLimit(.minutes(10))) struct DeployTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func text(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    /// Compose's file and every Kubernetes file, the overlays' patches included.
    static var manifestPaths: [String] {
        let folder = root.appendingPathComponent("deploy/kubernetes").path
        let kubernetes = (FileManager.default.subpaths(atPath: folder) ?? []).filter { $0.hasSuffix(".yaml") && !$0.hasSuffix("kustomization.yaml") }
        return ["deploy/docker-compose.yml"] + kubernetes.sorted().map { "deploy/kubernetes/" + $0 }
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
        let reference = try Self.text("docs/configuration.md")
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
            #expect(reference.contains("`\(name)`"), "\(name) is not in docs/configuration.md")
        }
    }

    /// The manifests a platform team applies: every kustomization rendered and valid against
    /// Kubernetes' schemas (`kubernetes-validate --strict`), every pod admitted under Pod Security
    /// "restricted", probes on every container, memory limits that hold the caps the containers
    /// allow, autoscaled Deployments without `replicas`, budgets that let a drain through, the
    /// metrics kept off the Service, and production pinned to this release's image.
    @Test func theRenderedManifestsAreValidRestrictedAndSizedForTheirCaps() async throws {
        let out = NSTemporaryDirectory() + "syncgate-rendered-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: out) }
        let (status, log) = try await SyncGateProcess.script(Self.root.appendingPathComponent("scripts/validate-manifests").path, ["--out", out], timeout: .seconds(600))
        #expect(status == "0" && log.contains("manifests: "), "\(log)")
        let renderings = try FileManager.default.contentsOfDirectory(atPath: out).filter { $0.hasSuffix(".yaml") }.sorted()
        #expect(renderings == ["base.yaml", "overlays-production.yaml"])
        for rendering in renderings {
            let resources = try Array(Yams.load_all(yaml: String(contentsOfFile: out + "/" + rendering, encoding: .utf8))).compactMap { $0 as? [String: Any] }
            try Self.checkRendering(rendering, resources)
            if rendering.hasPrefix("overlays-production") {
                let images = Self.nodes(resources).compactMap { ($0 as? [String: Any])?["image"] as? String }
                #expect(!images.isEmpty && images.allSatisfy { $0.hasSuffix(":\(SyncGateVersion.current)") }, "\(images)")
            }
        }
    }

    /// Bytes of a Kubernetes memory quantity (`256Mi`, `1Gi`, `1536Mi`, plain bytes).
    static func bytes(_ quantity: String) -> Int? {
        let units: [(String, Int)] = [("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("k", 1000), ("M", 1_000_000), ("G", 1_000_000_000)]
        for (suffix, factor) in units where quantity.hasSuffix(suffix) { return Int(quantity.dropLast(suffix.count)).map { $0 * factor } }
        return Int(quantity)
    }

    static func checkRendering(_ name: String, _ resources: [[String: Any]]) throws {
        func named(_ resource: [String: Any]) -> String { "\(name): \(resource["kind"] ?? "?")/\((resource["metadata"] as? [String: Any])?["name"] ?? "?")" }
        let autoscaled = Set(resources.compactMap { resource -> String? in
            guard ["HorizontalPodAutoscaler", "ScaledObject"].contains(resource["kind"] as? String) else { return nil }
            return ((resource["spec"] as? [String: Any])?["scaleTargetRef"] as? [String: Any])?["name"] as? String
        })
        // The fronts' body limit bounds the jobs a worker holds too.
        let bodyBytes = Self.nodes(resources).compactMap { node -> Int? in
            guard let variable = node as? [String: Any], variable["name"] as? String == "SYNCGATE_MAX_BODY_BYTES" else { return nil }
            return (variable["value"] as? String).flatMap(Int.init)
        }.first ?? 4 << 20
        var fronts = 0
        for resource in resources where resource["kind"] as? String == "Deployment" {
            let spec = resource["spec"] as? [String: Any] ?? [:]
            let deployment = (resource["metadata"] as? [String: Any])?["name"] as? String ?? ""
            if autoscaled.contains(deployment) {
                #expect(spec["replicas"] == nil, "\(named(resource)): an autoscaler owns its replicas; an apply would reset them")
            }
            let pod = (spec["template"] as? [String: Any])?["spec"] as? [String: Any] ?? [:]
            let podSecurity = pod["securityContext"] as? [String: Any] ?? [:]
            #expect(podSecurity["runAsNonRoot"] as? Bool == true && (podSecurity["runAsUser"] as? Int ?? 1) != 0, "\(named(resource)): runAsNonRoot")
            #expect((podSecurity["seccompProfile"] as? [String: Any])?["type"] as? String == "RuntimeDefault", "\(named(resource)): seccompProfile")
            #expect(pod["automountServiceAccountToken"] as? Bool == false, "\(named(resource)): no API token")
            for key in ["hostNetwork", "hostPID", "hostIPC"] { #expect(pod[key] as? Bool != true, "\(named(resource)): \(key)") }
            #expect((pod["volumes"] as? [[String: Any]] ?? []).allSatisfy { $0["hostPath"] == nil }, "\(named(resource)): hostPath")
            let initContainers = pod["initContainers"] as? [[String: Any]] ?? []
            let containers = pod["containers"] as? [[String: Any]] ?? []
            for (container, isInit) in initContainers.map({ ($0, true) }) + containers.map({ ($0, false) }) {
                let label = "\(named(resource)) container \(container["name"] ?? "?")"
                let security = container["securityContext"] as? [String: Any] ?? [:]
                #expect(security["allowPrivilegeEscalation"] as? Bool == false && security["privileged"] as? Bool != true, "\(label): privileges")
                #expect((security["capabilities"] as? [String: Any])?["drop"] as? [String] == ["ALL"], "\(label): capabilities.drop [ALL]")
                #expect((security["capabilities"] as? [String: Any])?["add"] == nil, "\(label): capabilities.add")
                #expect(security["readOnlyRootFilesystem"] as? Bool == true, "\(label): readOnlyRootFilesystem")
                if !isInit {
                    #expect(container["livenessProbe"] != nil && container["readinessProbe"] != nil, "\(label): probes")
                }
                let limit = ((container["resources"] as? [String: Any])?["limits"] as? [String: Any])?["memory"] as? String
                let limitBytes = try #require(limit.flatMap(Self.bytes), "\(label): a memory limit")
                let arguments = container["args"] as? [String] ?? []
                let environment = Dictionary((container["env"] as? [[String: Any]] ?? []).compactMap { variable in
                    (variable["name"] as? String).flatMap { name in (variable["value"] as? String).map { (name, $0) } }
                }, uniquingKeysWith: { _, last in last })
                func argument(_ flag: String) -> Int? { arguments.firstIndex(of: flag).flatMap { arguments.indices.contains($0 + 1) ? Int(arguments[$0 + 1]) : nil } }
                switch arguments.first {
                case "serve":
                    fronts += 1
                    let cap = try #require(environment["SYNCGATE_LIVE_CONNECTIONS_TOTAL"].flatMap(Int.init), "\(label): the live-connection cap its memory is sized for")
                    let needed = 256 << 20 + cap * 42 << 10 + 64 * bodyBytes
                    #expect(limitBytes >= needed, "\(label): \(limit ?? "-") < 256 MiB + \(cap) x 42 KiB + 64 x \(bodyBytes) B")
                    #expect(initContainers.contains { $0["args"] as? [String] == ["migrate"] }, "\(label): migrations before the front starts")
                    #expect(environment["SYNCGATE_METRICS_PORT"] != nil, "\(label): /metrics on a port of its own")
                case "worker":
                    let lanes = argument("--concurrency") ?? 4, batch = argument("--batch") ?? 16
                    let needed = 256 << 20 + lanes * batch * bodyBytes * 2
                    #expect(limitBytes >= needed, "\(label): \(limit ?? "-") < 256 MiB + \(lanes) x \(batch) x \(bodyBytes) B x 2")
                default:
                    break
                }
            }
        }
        #expect(fronts == 1, "\(name): one front Deployment")
        for resource in resources where resource["kind"] as? String == "PodDisruptionBudget" {
            let spec = resource["spec"] as? [String: Any] ?? [:]
            #expect(spec["minAvailable"] == nil && (spec["maxUnavailable"] as? Int ?? 0) >= 1, "\(named(resource)): a budget a drain can pass at any replica count")
        }
        for resource in resources where resource["kind"] as? String == "Service" {
            let ports = (resource["spec"] as? [String: Any])?["ports"] as? [[String: Any]] ?? []
            #expect(ports.allSatisfy { "\($0["targetPort"] ?? "")" != "metrics" && $0["port"] as? Int != 9090 }, "\(named(resource)): metrics stay off the Service")
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

    /// The image builds from exactly what the Dockerfile copies. Its build stage is replayed in an
    /// empty folder: each COPY (less `.dockerignore`), `swift package resolve` where the Dockerfile
    /// runs it; then SwiftPM must load the whole package there and find the product the image
    /// builds. (No container engine runs here. This failed while a target's folder was not copied.)
    @Test func theImageBuildsFromWhatTheDockerfileCopies() async throws {
        let stage = try Self.buildStage(of: try Self.text("deploy/Dockerfile"))
        let ignored = try Self.text(".dockerignore").split(separator: "\n")
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && !$0.hasPrefix("#") }
        let context = NSTemporaryDirectory() + "syncgate-image-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: context, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: context) }
        var resolved = false
        for instruction in stage {
            if instruction.hasPrefix("COPY ") {
                let words = instruction.split(separator: " ").dropFirst().map(String.init).filter { !$0.hasPrefix("--") }
                let destination = try #require(words.last)
                for source in words.dropLast() {
                    try Self.copy(source, to: destination, in: context, ignoring: ignored)
                }
            } else if instruction.hasPrefix("RUN "), instruction.contains("swift package resolve") {
                let (status, log) = try await Self.swiftPM("package resolve", in: context)
                #expect(status == "0", "swift package resolve, with what was copied before it:\n\(log.suffix(3000))")
                resolved = true
            }
        }
        #expect(resolved, "the build stage resolves the dependencies in a layer of their own")
        let (status, log) = try await Self.swiftPM("package describe --type json > describe.json", in: context)
        #expect(status == "0", "swift package describe, with everything the image copies:\n\(log.suffix(3000))")
        let description = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: context + "/describe.json"))) as? [String: Any]
        let products = (description?["products"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }
        #expect(products.contains("syncgate"), "products: \(products)")
        #expect(stage.contains { $0.hasPrefix("RUN ") && $0.contains("swift build") && $0.contains("--product syncgate") })
        #expect(try Self.text("deploy/Dockerfile").contains("ENTRYPOINT [\"/usr/local/bin/syncgate\"]"))
    }

    /// The documented commands build that image: the repository root as the context, this
    /// Dockerfile; Compose builds it the same way.
    @Test func theDocumentedImageCommandsUseTheRepositoryAsContext() throws {
        let compose = try #require(try Yams.load(yaml: Self.text("deploy/docker-compose.yml")) as? [String: Any])
        let build = try #require((compose["x-syncgate"] as? [String: Any])?["build"] as? [String: Any])
        #expect(build["context"] as? String == "..", "Compose's context is the repository root (relative to deploy/)")
        #expect(build["dockerfile"] as? String == "deploy/Dockerfile")
        var commands = 0
        let documents = ["README.md", "deploy/Dockerfile", "deploy/docker-compose.yml"]
            + (try FileManager.default.contentsOfDirectory(atPath: Self.root.appendingPathComponent("docs").path)).filter { $0.hasSuffix(".md") }.map { "docs/" + $0 }
        for path in documents {
            for line in try Self.text(path).split(separator: "\n") {
                guard let build = line.range(of: "docker build ") else { continue }
                commands += 1
                let command = line[build.lowerBound...].prefix { $0 != "`" && $0 != "#" }.trimmingCharacters(in: .whitespaces)
                #expect(command.contains("-f deploy/Dockerfile") && command.hasSuffix(" ."), "\(path): \(command)")
            }
        }
        #expect(commands >= 2)
    }

    /// The instructions of a Dockerfile's first stage, continuation lines joined, comments dropped.
    static func buildStage(of dockerfile: String) throws -> [String] {
        var instructions: [String] = []
        var current = ""
        for line in dockerfile.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if current.isEmpty && (trimmed.isEmpty || trimmed.hasPrefix("#")) { continue }
            if trimmed.hasSuffix("\\") {
                current += trimmed.dropLast() + " "
                continue
            }
            instructions.append(current + trimmed)
            current = ""
        }
        let stages = instructions.split { $0.hasPrefix("FROM ") }
        return Array(try #require(stages.first))
    }

    /// `COPY source destination` from the repository into `context` (the image's WORKDIR): a
    /// folder's contents into the destination folder, a file into a folder (`./`) or to a path;
    /// paths `.dockerignore` excludes are left out.
    static func copy(_ source: String, to destination: String, in context: String, ignoring patterns: [String]) throws {
        let manager = FileManager.default
        let from = root.appendingPathComponent(source)
        var isFolder: ObjCBool = false
        guard manager.fileExists(atPath: from.path, isDirectory: &isFolder) else {
            throw TestEnvironmentError(description: "deploy/Dockerfile copies \(source), which does not exist")
        }
        func isIgnored(_ relative: String) -> Bool {
            patterns.contains { pattern in
                let pattern = pattern.hasSuffix("/") ? String(pattern.dropLast()) : pattern
                let parts = relative.split(separator: "/")
                return (1...parts.count).contains { fnmatch(pattern, parts.prefix($0).joined(separator: "/"), 0) == 0 }
            }
        }
        let target = URL(fileURLWithPath: context).appendingPathComponent(destination)
        guard isFolder.boolValue else {
            let file = destination.hasSuffix("/") ? target.appendingPathComponent(from.lastPathComponent) : target
            try manager.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            // COPY replaces what an earlier COPY put there.
            try? manager.removeItem(at: file)
            try manager.copyItem(at: from, to: file)
            return
        }
        for case let relative as String in manager.enumerator(atPath: from.path) ?? FileManager.DirectoryEnumerator() {
            var isSubfolder: ObjCBool = false
            let path = from.appendingPathComponent(relative).path
            guard manager.fileExists(atPath: path, isDirectory: &isSubfolder), !isSubfolder.boolValue, !isIgnored(source + "/" + relative) else { continue }
            let file = target.appendingPathComponent(relative)
            try manager.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            try? manager.removeItem(at: file)
            try manager.copyItem(atPath: path, toPath: file.path)
        }
    }

    /// `swift <arguments>` run in `folder` by bash; its exit status and output.
    static func swiftPM(_ arguments: String, in folder: String) async throws -> (status: String, log: String) {
        let script = NSTemporaryDirectory() + "syncgate-swiftpm-\(UUID().uuidString.prefix(8)).sh"
        // SwiftPM's own temporary files (locks, the manifest's build) go with the folder.
        try "mkdir -p '\(folder)/.tmp' && cd '\(folder)' && TMPDIR='\(folder)/.tmp' swift \(arguments)\n".write(toFile: script, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: script) }
        // Run by bash, not exec'd: a child another test forks while the file is being written
        // holds it open for writing, and exec'ing it then fails with ETXTBSY ("Text file busy").
        // Resolving clones every dependency from the local mirrors (about a minute on a loaded machine).
        return try await SyncGateProcess.script("/bin/bash", [script], timeout: .seconds(900))
    }

    /// The Grafana dashboard charts every series SyncGate exports and no other; docs/operations.md
    /// lists them all; the Prometheus configuration parses and scrapes the annotated pods.
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
        let operations = try Self.text("docs/operations.md")
        for name in MetricName.all { #expect(operations.contains("`\(name)`"), "\(name) is not in docs/operations.md") }

        let prometheus = try #require(try Yams.load(yaml: Self.text("deploy/prometheus/prometheus.yml")) as? [String: Any])
        let jobs = try #require(prometheus["scrape_configs"] as? [[String: Any]])
        #expect(jobs.contains { $0["kubernetes_sd_configs"] != nil })
        // The pods it keeps are the ones the manifests annotate.
        for path in ["deploy/kubernetes/base/front.yaml", "deploy/kubernetes/base/worker.yaml"] {
            #expect(try Self.text(path).contains("prometheus.io/scrape: \"true\""), "\(path) is not annotated for scraping")
        }
    }

    /// `syncgate help <command>` from the binary under test.
    static func help(_ command: String) async throws -> String {
        let process = try SyncGateProcess(["help", command], environment: [:])
        guard await process.waitForExit(timeout: hangGuard) == 0 else {
            throw TestEnvironmentError(description: "`syncgate help \(command)` failed: \(process.log)")
        }
        return process.log
    }
}
