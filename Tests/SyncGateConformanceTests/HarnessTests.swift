import HTTPTypes
import HummingbirdTesting
import SyncGateHTTP
import SyncGateTestSupport
import Testing

/// The test harness itself, where a fault of its own failed tests of code that was right.
@Suite(.timeLimit(.minutes(10))) struct HarnessTests {
    /// A live harness's next request works after the server closed the connection the last one
    /// used. The convergence run failed with "I/O on closed channel" on a loaded machine: its
    /// harness requests came further apart than the server's idle timeout, which closed the one
    /// connection HummingbirdTesting's live client keeps. A 413 closes it just as surely, at once.
    @Test(arguments: Driver.selected)
    func aLiveHarnessOutlivesTheServerClosingItsConnection(_ driver: Driver) async throws {
        var configuration = HTTPHarness.testConfiguration
        configuration.maximumBodyBytes = 1024
        try await HTTPHarness.with(driver, setup: .live, configuration: configuration, workers: 0) { http in
            let oversized = try await http.send(.post, "/v1/sync/push", headers: try await http.headers(), body: String(repeating: " ", count: 4096))
            #expect(oversized.status == 413)
            #expect(try await http.send(.get, "/healthz", headers: [:]).status == 200)
            #expect(try await http.pull().status == 200)
        }
    }
}
