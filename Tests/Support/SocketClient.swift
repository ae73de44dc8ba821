package import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import SyncGateCore
import SyncGateHTTP
package import SyncGateWire

/// Many concurrent requests to a server on a real socket (HummingbirdTesting's live client runs
/// one request at a time on one connection), each on a connection of its own.
package final class SocketClient: Sendable {
    package let port: Int
    let client: HTTPClient

    init(port: Int, client: HTTPClient) {
        self.port = port
        self.client = client
    }

    /// Runs `body` with a client, and shuts it down after, whatever happens.
    package static func with<Result: Sendable>(port: Int, _ body: (SocketClient) async throws -> Result) async throws -> Result {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 256)
        configuration.timeout = .init(connect: .seconds(10), read: .seconds(120))
        return try await HTTPClient.withHTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration) { client in
            try await body(SocketClient(port: port, client: client))
        }
    }

    /// A GET with a bearer token and device; the body parsed as JSON when it is JSON.
    package func get(_ path: String, token: String, device: String = "d1") async throws -> (status: Int, json: JSONValue?, headers: [String: String]) {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)")
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "X-Device-Id", value: device)
        let response = try await client.execute(request, timeout: .seconds(120))
        let body = try await response.body.collect(upTo: 16 * 1024 * 1024)
        var headers: [String: String] = [:]
        for header in response.headers { headers[header.name.lowercased()] = header.value }
        return (Int(response.status.code), try? JSONParser().parse(Array(body.readableBytesView)), headers)
    }

    /// Opens an event stream; read it with the returned response's body.
    package func events(token: String, device: String = "watcher") async throws -> HTTPClientResponse {
        // By the path the server runs in a child task: a route moved without it fails here.
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(StreamRoutes.eventStream)")
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "X-Device-Id", value: device)
        return try await client.execute(request, timeout: .seconds(120))
    }
}
