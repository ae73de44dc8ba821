import Foundation
import HTTPTypes
import SyncGateCore
import SyncGateWire
import SyncGateTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The README's first command and its curl session, and the example pushes of
/// docs/entity-types.md, exactly as written.
@Suite(.timeLimit(.minutes(10))) struct QuickstartTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static var readme: URL { root.appendingPathComponent("README.md") }
    static var entityTypes: URL { root.appendingPathComponent("docs/entity-types.md") }

    /// The shell block between the quickstart markers.
    static func quickstartScript() throws -> String {
        let text = try String(contentsOf: readme, encoding: .utf8)
        guard let begin = text.range(of: "<!-- quickstart:begin -->"), let end = text.range(of: "<!-- quickstart:end -->") else {
            throw TestEnvironmentError(description: "README.md has no quickstart markers")
        }
        let block = text[begin.upperBound..<end.lowerBound]
        guard let open = block.range(of: "```bash\n"), let close = block.range(of: "\n```", options: .backwards) else {
            throw TestEnvironmentError(description: "the quickstart block is not a bash code block")
        }
        return String(block[open.upperBound..<close.lowerBound])
    }

    /// The first fenced block of `language` after `heading` in docs/entity-types.md.
    static func block(after heading: String, language: String) throws -> String {
        let text = try String(contentsOf: entityTypes, encoding: .utf8)
        guard let section = text.range(of: heading),
              let open = text.range(of: "```\(language)\n", range: section.upperBound..<text.endIndex),
              let close = text.range(of: "\n```", range: open.upperBound..<text.endIndex)
        else { throw TestEnvironmentError(description: "docs/entity-types.md has no \(language) block after \(heading)") }
        return String(text[open.upperBound..<close.lowerBound])
    }

    /// The documented example pushes — the household one, then one per reference app — each apply
    /// every operation through the real router, as docs/entity-types.md says they do.
    @Test(arguments: Driver.selected)
    func theReadmeExamplePushesApply(_ driver: Driver) async throws {
        let household = try Self.block(after: "## Households", language: "json")
        // `//` lines are comments; the bodies are separated by blank lines.
        let apps = try Self.block(after: "### One push per reference app", language: "jsonc")
            .split(separator: "\n", omittingEmptySubsequences: false).filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }.joined(separator: "\n")
        let bodies = [household] + apps.components(separatedBy: "\n\n")
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { !$0.isEmpty }
        #expect(bodies.count == 6)
        try await HTTPHarness.with(driver) { http in
            for body in bodies {
                #expect((try? JSONParser().parse(body)) != nil, "not JSON: \(body)")
                let response = try await http.send(.post, "/v1/sync/push?wait=30000", headers: try await http.headers(), body: body)
                #expect(response.status == 200, "\(String(describing: response.json))")
                let statuses = response.json?["results"]?.arrayValue?.compactMap { $0["status"]?.stringValue } ?? []
                #expect(!statuses.isEmpty && statuses.allSatisfy { $0 == "applied" }, "\(body) → \(String(describing: response.json))")
            }
            let state = try await http.state()
            #expect(state["dailySummaries/2026-01-15"]?["data"]?["calories"] == 180)
            #expect(state["inventory/milk"]?["household_id"] == "home")
            #expect(try await http.state(user: "bob")["inventory/eggs"] != nil)
        }
    }

    @Test func theReadmeSessionWorksAgainstAZeroSetupServer() async throws {
        let script = try Self.quickstartScript()
        #expect(script.contains("http://127.0.0.1:8080/"))
        let folder = try EmbeddedModeTests.freshFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        // The README's first command is `swift run syncgate serve`: the same binary and no settings
        // but the port — a free one here, where the README's session says the default 8080.
        let port = SyncGateProcess.freePort()
        var environment = EmbeddedModeTests.plainEnvironment
        environment["SYNCGATE_PORT"] = "\(port)"
        let server = try SyncGateProcess(["serve"], environment: environment, directory: folder, replaceEnvironment: true)
        defer { server.signal(SIGKILL) }
        try await ProcessClient(base: "http://127.0.0.1:\(port)").waitUntilReady(server)

        // Shims, and nothing else added to the README's text: `swift run [-q] syncgate …` runs the
        // binary under test, and curl talks to the test's port and ends each answer with a newline,
        // so that every answer is one line to parse.
        let shim = """
            set -euo pipefail
            swift() { [ "$1" = run ] || exit 97; shift; [ "$1" = -q ] && shift; [ "$1" = syncgate ] || exit 98; shift; "\(try SyncGateProcess.binary())" "$@"; }
            curl() { local args=(); for arg in "$@"; do args+=("${arg//127.0.0.1:8080/127.0.0.1:\(port)}"); done; command curl "${args[@]}"; echo; }

            """
        try (shim + script).write(toFile: folder + "/session.sh", atomically: true, encoding: .utf8)
        let session = try SyncGateProcess.shell(folder + "/session.sh", in: folder, environment: EmbeddedModeTests.plainEnvironment)
        #expect(await session.waitForExit(timeout: hangGuard) == 0, "\(session.log)")

        let answers = session.log.split(separator: "\n").compactMap { try? JSONParser().parse(String($0)) }
        let push = try #require(answers.first { $0["job_id"] != nil }, "\(session.log)")
        #expect(push["status"] == "done")
        #expect(push["results"]?.arrayValue?.map { $0["status"] } == ["applied", "applied"])
        let pull = try #require(answers.first { $0["changes"] != nil }, "\(session.log)")
        let changes = pull["changes"]?.arrayValue ?? []
        #expect(Set(changes.compactMap { $0["entity_id"]?.stringValue }) == ["fl_1", "w_1", "2026-01-15"])
        let summary = changes.first { $0["entity_type"] == "dailySummaries" }
        #expect(summary?["data"]?["calories"] == 200)
        #expect(summary?["data"]?["meal_count"] == 1)
    }
}
