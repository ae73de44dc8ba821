import Foundation
import SyncGateTestSupport
import Testing

/// The target graph docs/architecture.md draws, read from the manifest: each rule here is one a
/// later change could break without any other test noticing.
@Suite struct TargetGraphTests {
    /// Each target of the package and the targets of the package it depends on directly.
    static func graph() throws -> [String: (type: String, targets: Set<String>)] {
        let root = URL(filePath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let scratch = FileManager.default.temporaryDirectory.appending(path: "syncgate-dump-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        // A scratch path of its own: `swift test` holds the package's own .build.
        let (status, output) = try Spawn.run(
            "/usr/bin/env", ["swift", "package", "dump-package", "--package-path", root.path, "--scratch-path", scratch.path]
        )
        #expect(status == 0, "\(output)")
        // Standard error shares the file: the manifest is the JSON object from the first `{` line.
        let json = output.split(separator: "\n", omittingEmptySubsequences: false).drop { !$0.hasPrefix("{") }.joined(separator: "\n")
        let manifest = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any], "\(output)")
        let targets = try #require(manifest["targets"] as? [[String: Any]])
        let names = Set(targets.compactMap { $0["name"] as? String })
        var graph: [String: (type: String, targets: Set<String>)] = [:]
        for target in targets {
            let name = try #require(target["name"] as? String)
            // Each dependency is {"byName" | "target" | "product": [name, …]}.
            let dependencies = (target["dependencies"] as? [[String: Any]] ?? []).compactMap { dependency in
                dependency.values.first.flatMap { ($0 as? [Any])?.first as? String }
            }
            graph[name] = (target["type"] as? String ?? "", Set(dependencies).intersection(names))
        }
        return graph
    }

    static func closure(of target: String, in graph: [String: (type: String, targets: Set<String>)]) -> Set<String> {
        var seen: Set<String> = []
        var next = [target]
        while let name = next.popLast() {
            for dependency in graph[name]?.targets ?? [] where seen.insert(dependency).inserted { next.append(dependency) }
        }
        return seen
    }

    @Test func theWireModuleDependsOnNothing() throws {
        let graph = try Self.graph()
        #expect(graph["SyncGateWire"]?.targets == [])
    }

    @Test func theSDKLinksNoServerTarget() throws {
        let graph = try Self.graph()
        #expect(Self.closure(of: "SyncGateClient", in: graph) == ["SyncGateWire", "SyncGateConcurrency"])
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
