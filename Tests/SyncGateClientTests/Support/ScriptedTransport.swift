import Foundation
import Synchronization

@testable import SyncGateClient

/// A transport that answers from a script instead of a server, and remembers every request.
final class ScriptedTransport: SyncTransport {
    typealias Handler = @Sendable (TransportRequest) async throws -> TransportResponse
    private let handler: Handler
    private let log = Mutex<[TransportRequest]>([])

    init(_ handler: @escaping Handler) {
        self.handler = handler
    }

    var requests: [TransportRequest] { log.withLock { $0 } }

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        log.withLock { $0.append(request) }
        return try await handler(request)
    }

    func stream(_ request: TransportRequest) async throws -> TransportStream {
        log.withLock { $0.append(request) }
        let response = try await handler(request)
        let body = response.body
        return TransportStream(status: response.status, headers: response.headers, body: AsyncThrowingStream { stream in
            if !body.isEmpty { stream.yield(body) }
            stream.finish()
        })
    }

    static func json(_ value: JSONValue, status: Int = 200, headers: [String: String] = [:]) -> TransportResponse {
        TransportResponse(status: status, headers: headers, body: Array(value.serialized().utf8))
    }

    static func error(_ status: Int, _ code: String, retryAfter: String? = nil) -> TransportResponse {
        json(["error": ["code": .string(code), "message": "scripted", "retryable": .bool(status == 429 || status >= 500)]], status: status, headers: retryAfter.map { ["retry-after": $0] } ?? [:])
    }

    static func emptyPage(cursor: String = "c1") -> TransportResponse {
        page([], cursor: cursor)
    }

    /// A pull page of `changes` (see ``change(_:_:_:)``).
    static func page(_ changes: [JSONValue], cursor: String, hasMore: Bool = false, watermark: Int64 = 0) -> TransportResponse {
        json([
            "changes": .array(changes), "cursor": .string(cursor), "has_more": .bool(hasMore), "force_resync": false,
            "scopes": ["added": [], "removed": []], "device_watermark": .string(String(watermark)),
        ])
    }

    /// A change of the user's own entity at version 1.
    static func change(_ type: String, _ id: String, _ data: JSONObject) -> JSONValue {
        [
            "entity_type": .string(type), "entity_id": .string(id), "version": 1, "operation": "upsert", "data": .object(data),
            "household_id": .null, "updated_at": "2026-01-15T10:00:00.000Z",
        ]
    }

    /// `applied` results for the operations of a push body, versions from `version`.
    static func applied(_ request: TransportRequest, version: Int64 = 1) -> [JSONValue] {
        operations(request).map { operation in
            ["idempotency_key": operation["idempotency_key"]!, "entity_type": operation["entity_type"]!, "entity_id": operation["entity_id"]!, "status": "applied", "version": .int(version)]
        }
    }

    static func operations(_ request: TransportRequest) -> [JSONValue] {
        (try? JSONValue(parsing: request.body ?? []))?["operations"]?.arrayValue ?? []
    }
}

extension TransportRequest {
    var route: String { String(path.split(separator: "?").first ?? "") }

    func query(_ name: String) -> String? {
        guard let query = path.split(separator: "?", maxSplits: 1).dropFirst().first else { return nil }
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.first.map(String.init) == name { return parts.count > 1 ? String(parts[1]).removingPercentEncoding : "" }
        }
        return nil
    }
}

/// A client on a fresh file with a scripted server.
func scriptedClient(
    token: @escaping @Sendable () async throws -> String = { "token" },
    configure: (inout SyncClient.Configuration) -> Void = { _ in },
    _ handler: @escaping ScriptedTransport.Handler
) throws -> (SyncClient, ScriptedTransport) {
    let transport = ScriptedTransport(handler)
    var configuration = SyncClient.Configuration(serverURL: URL(string: "http://scripted")!, databasePath: try temporaryFolder("engine") + "/device.sqlite", deviceID: "phone", token: token)
    configuration.jobFollowWait = .milliseconds(10)
    configuration.jobFollowLimit = .seconds(5)
    configure(&configuration)
    return (try SyncClient(configuration, transport: transport), transport)
}
