import Foundation
import SyncGateTestSupport
import Testing

/// The OpenAPI document against the real server: `scripts/openapi-fuzz` runs Schemathesis
/// (installed from PyPI into a virtual environment when absent) on every documented operation of
/// a live `syncgate serve`, checking that no request gets a 5xx and that every response conforms
/// to the document (status, content type, headers, body). Never skipped: without Python or PyPI
/// the script fails, and so does the test.
@Suite(.timeLimit(.minutes(10))) struct OpenAPIFuzzTests {
    static let scriptPath = DeployTests.root.appendingPathComponent("scripts/openapi-fuzz").path

    @Test func everyDocumentedOperationConformsAndNoneFailsTheServer() async throws {
        let reports = NSTemporaryDirectory() + "syncgate-openapi-fuzz-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: reports) }
        let (status, log) = try await SyncGateProcess.script(
            Self.scriptPath, ["--binary", try SyncGateProcess.binary(), "--max-examples", "50", "--workers", "1", "--report-dir", reports],
            timeout: .seconds(540)
        )
        // The summary line, with the counts read from Schemathesis's own report.
        let summary = log.split(separator: "\n").last { $0.hasPrefix("openapi fuzz: ") }.map(String.init)
        print(summary ?? "openapi fuzz: no summary")
        #expect(status == "0", "scripts/openapi-fuzz exited \(status):\n\(log.suffix(4000))")
        let numbers = (summary ?? "").split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
        try #require(numbers.count == 3, "no summary line in:\n\(log.suffix(4000))")
        #expect(numbers[0] >= 500, "too few cases ran: \(numbers[0])")
        #expect(numbers[1] == 0 && numbers[2] == 0)
    }
}
