import Foundation
import HummingbirdTesting
import SyncGateClient
import SyncGateTestSupport

/// Simulated devices of users against one harness's live server.
struct Devices {
    let http: HTTPHarness
    let folder: String

    init(_ http: HTTPHarness) throws {
        self.http = http
        folder = try temporaryFolder("devices")
    }

    var serverURL: URL {
        get throws {
            guard let port = http.client.port else { throw TestEnvironmentError(description: "the harness has no port: use setup .live") }
            return URL(string: "http://127.0.0.1:\(port)")!
        }
    }

    /// A device of `user` named `name` (its SQLite file and device id).
    func make(
        _ user: String, _ name: String, configure: (inout SyncClient.Configuration) -> Void = { _ in },
        transport: ((any SyncTransport) -> any SyncTransport)? = nil
    ) throws -> SyncClient {
        let http = self.http
        var configuration = SyncClient.Configuration(
            serverURL: try serverURL, databasePath: "\(folder)/\(name).sqlite", deviceID: name, token: { try await http.token(user) }
        )
        configuration.pushWait = .seconds(5)
        configuration.jobFollowWait = .seconds(5)
        configuration.backoff = Backoff(initial: .milliseconds(20), maximum: .milliseconds(500))
        configure(&configuration)
        let base = URLSessionTransport(baseURL: try serverURL)
        return try SyncClient(configuration, transport: transport?(base) ?? base)
    }
}
