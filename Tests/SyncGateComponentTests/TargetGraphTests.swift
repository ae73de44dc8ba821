import Foundation
import SyncGateTestSupport
import Testing

/// The target graph docs/architecture.md draws, read from the manifest: each rule here is one a
/// later change could break without any other test noticing.
@Suite struct TargetGraphTests {
    typealias Graph = [String: (type: String, targets: Set<String>)]

    static let root = URL(filePath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// A package's manifest as `swift package dump-package` reads it.
    static func manifest(_ package: URL) throws -> [String: Any] {
        let scratch = FileManager.default.temporaryDirectory.appending(path: "syncgate-dump-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        // A scratch path of its own: `swift test` holds the package's own .build.
        let (status, output) = try Spawn.run(
            "/usr/bin/env", ["swift", "package", "dump-package", "--package-path", package.path, "--scratch-path", scratch.path]
        )
        #expect(status == 0, "\(output)")
        // Standard error shares the file: the manifest is the JSON object from the first `{` line.
        let json = output.split(separator: "\n", omittingEmptySubsequences: false).drop { !$0.hasPrefix("{") }.joined(separator: "\n")
        return try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any], "\(output)")
    }

    /// Each target of a package and what it depends on directly among the package's own targets
    /// and the SDK package's products (the server's package names SyncGateWire and the rest so).
    static func graph(of package: URL = root) throws -> Graph {
        let targets = try #require(try manifest(package)["targets"] as? [[String: Any]])
        let names = Set(targets.compactMap { $0["name"] as? String })
        var graph: Graph = [:]
        for target in targets {
            let name = try #require(target["name"] as? String)
            // Each dependency is {"byName" | "target": [name, …]} or {"product": [name, package, …]}.
            let dependencies = (target["dependencies"] as? [[String: Any]] ?? []).compactMap { dependency -> String? in
                guard let (kind, value) = dependency.first, let fields = value as? [Any], let dependency = fields.first as? String else { return nil }
                if kind == "product" { return fields.dropFirst().first as? String == "SyncGateSDK" ? dependency : nil }
                return names.contains(dependency) ? dependency : nil
            }
            graph[name] = (target["type"] as? String ?? "", Set(dependencies))
        }
        return graph
    }

    static let sdk = root.appending(path: "Sources/SyncGateSDK")

    static func closure(of target: String, in graph: Graph) -> Set<String> {
        var seen: Set<String> = []
        var next = [target]
        while let name = next.popLast() {
            for dependency in graph[name]?.targets ?? [] where seen.insert(dependency).inserted { next.append(dependency) }
        }
        return seen
    }

    @Test func theWireModuleDependsOnNothing() throws {
        let graph = try Self.graph(of: Self.sdk)
        #expect(graph["SyncGateWire"]?.targets == [])
        #expect(graph["SyncGateConcurrency"]?.targets == [])
    }

    /// The SDK is a package of its own whose only dependencies are GRDB and swift-log, so an app
    /// resolves nothing of the server's.
    @Test func theSDKPackageDependsOnGRDBAndSwiftLogAlone() throws {
        let graph = try Self.graph(of: Self.sdk)
        #expect(Self.closure(of: "SyncGateClient", in: graph) == ["SyncGateWire", "SyncGateConcurrency"])
        let dependencies = try #require(try Self.manifest(Self.sdk)["dependencies"] as? [[String: Any]])
        let locations = dependencies.compactMap { dependency -> String? in
            guard let source = (dependency["sourceControl"] as? [[String: Any]])?.first,
                let location = source["location"] as? [String: Any], let remote = (location["remote"] as? [[String: Any]])?.first
            else { return nil }
            return remote["urlString"] as? String
        }
        #expect(Set(locations) == ["https://github.com/groue/GRDB.swift.git", "https://github.com/apple/swift-log.git"], "\(dependencies)")
        #expect(locations.count == dependencies.count)
    }

    /// An app's package that depends on the SDK (Tests/Fixtures/PantryApp) resolves GRDB and
    /// swift-log and nothing else: no NIO, Hummingbird, PostgresNIO or other server package.
    @Test func anAppResolvesNoServerPackage() throws {
        let app = Self.root.appending(path: "Tests/Fixtures/PantryApp")
        let scratch = FileManager.default.temporaryDirectory.appending(path: "syncgate-app-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let (status, output) = try Spawn.run(
            "/usr/bin/env", ["swift", "package", "--package-path", app.path, "--scratch-path", scratch.path, "show-dependencies", "--format", "json"]
        )
        #expect(status == 0, "\(output)")
        let json = output.split(separator: "\n", omittingEmptySubsequences: false).drop { !$0.hasPrefix("{") }.joined(separator: "\n")
        let tree = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any], "\(output)")
        var identities: Set<String> = []
        var next = [tree]
        while let package = next.popLast() {
            for dependency in package["dependencies"] as? [[String: Any]] ?? [] {
                if let identity = dependency["identity"] as? String { identities.insert(identity) }
                next.append(dependency)
            }
        }
        #expect(identities == ["syncgatesdk", "grdb.swift", "swift-log"], "\(identities)")
    }

    @Test func coreMakesProtocolDecisionsOnTheWireModuleAlone() throws {
        let graph = try Self.graph()
        #expect(Self.closure(of: "SyncGateCore", in: graph) == ["SyncGateWire"])
    }

    /// The storage seam knows no front and no dialect: the dialects plug into the front and
    /// reach storage through a protocol of their own.
    @Test func theStorageSeamKnowsNoFrontAndNoDialect() throws {
        let graph = try Self.graph()
        for target in ["SyncGateStorage", "SyncGatePostgres", "SyncGateSQLite", "SyncGateWorker", "SyncGateHTTP"] {
            let reached = Self.closure(of: target, in: graph)
            #expect(!reached.contains("SyncGateDialects"), "\(target) reaches the dialects")
        }
        #expect(!Self.closure(of: "SyncGateStorage", in: graph).contains("SyncGateHTTP"))
    }

    /// Only the executable links the load generators.
    @Test func noServerTargetLinksTheLoadTool() throws {
        let graph = try Self.graph()
        let dependents = graph.filter { $0.value.type != "test" && $0.value.targets.contains("SyncGateLoad") }.map(\.key)
        #expect(dependents == ["syncgate"])
    }
}
