import Foundation
import SyncGateCore
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The README's first command and its curl session, exactly as written.
@Suite struct QuickstartTests {
    static var readme: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("README.md")
    }

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

    @Test func theReadmeSessionWorksAgainstAZeroSetupServer() async throws {
        let script = try Self.quickstartScript()
        #expect(script.contains("http://127.0.0.1:8080/"))
        let folder = try EmbeddedModeTests.freshFolder()
        // The README's first command is `swift run syncgate serve`: the same binary, no settings,
        // so the default port 8080 the session talks to.
        let server = try EmbeddedModeTests.start(["serve"], in: folder)
        defer { server.signal(SIGKILL) }
        try await ProcessClient(base: "http://127.0.0.1:8080").waitUntilReady(server)

        // Two shims, and nothing else added to the README's text: `swift run [-q] syncgate …` runs
        // the binary under test, and each curl ends its output with a newline so that every
        // answer is one line to parse.
        let shim = """
            set -euo pipefail
            swift() { [ "$1" = run ] || exit 97; shift; [ "$1" = -q ] && shift; [ "$1" = syncgate ] || exit 98; shift; "\(try SyncGateProcess.binary())" "$@"; }
            curl() { command curl "$@"; echo; }

            """
        try (shim + script).write(toFile: folder + "/session.sh", atomically: true, encoding: .utf8)
        let session = try SyncGateProcess.shell(folder + "/session.sh", in: folder, environment: EmbeddedModeTests.plainEnvironment)
        #expect(await session.waitForExit(timeout: .seconds(60)) == 0, "\(session.log)")

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
