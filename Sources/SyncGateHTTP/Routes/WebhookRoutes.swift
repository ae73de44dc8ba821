import HTTPTypes
import Hummingbird
import NIOCore
import Logging
import SyncGateStorage
import SyncGateWire

/// `/v1/service/webhooks` (`admin` scope): the backend manages its change webhook subscriptions
/// (docs/webhooks.md), the same functions as `syncgate admin webhooks`; the admin listener
/// serves the same routes under `/admin/v1/webhooks`.
///
/// - `GET /v1/service/webhooks`: every subscription with its backlog, never a secret.
/// - `POST /v1/service/webhooks` `{"name", "url", "entity_types"?, "events"?}`: 201 with the
///   subscription and its `secret`, shown once.
/// - `DELETE /v1/service/webhooks/{name}`: 204.
/// - `POST /v1/service/webhooks/{name}/pause|resume`: the subscription.
/// - `POST /v1/service/webhooks/{name}/replay` `{"from": RFC 3339}`: `{"replayed": n}`.
struct WebhookRoutes: Sendable {
    let administration: any WebhookAdministration
    /// Reads a request's body within the listener's size limit.
    let readBody: @Sendable (Request) async throws -> ByteBuffer

    func add(to group: RouterGroup<SyncRequestContext>) {
        group.get("webhooks", use: list)
        group.post("webhooks", use: create)
        group.delete("webhooks/:name", use: delete)
        group.post("webhooks/:name/pause", use: pause)
        group.post("webhooks/:name/resume", use: resume)
        group.post("webhooks/:name/replay", use: replay)
    }

    func list(_ request: Request, context: SyncRequestContext) async throws -> Response {
        _ = try context.service(granting: .admin)
        _ = try RequestReader(request: request).query(allowed: [])
        return .json(.object(["webhooks": .array(try await administration.list())]))
    }

    func create(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let service = try context.service(granting: .admin)
        _ = try RequestReader(request: request).query(allowed: [])
        let body = try await object(request)
        guard let name = body["name"]?.stringValue else { throw ProtocolError(.validationError, "'name' must be a string") }
        guard let url = body["url"]?.stringValue else { throw ProtocolError(.validationError, "'url' must be a string") }
        let types = try strings(body["entity_types"], "entity_types")
        let events = try strings(body["events"], "events") ?? []
        do {
            let created = try await administration.create(name: name, url: url, entityTypes: types.map(Set.init), events: events)
            context.logger.notice("webhook created", metadata: ["syncgate.webhook": "\(name)", "syncgate.service": "\(service.name)"])
            return .json(created, status: .created)
        } catch let refused as WebhookRequestRefused {
            throw ProtocolError(.validationError, refused.description)
        }
    }

    func delete(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let service = try context.service(granting: .admin)
        _ = try RequestReader(request: request).query(allowed: [])
        let name = try context.parameters.require("name")
        guard try await administration.delete(name: name) else { throw Self.unknown(name) }
        context.logger.notice("webhook deleted", metadata: ["syncgate.webhook": "\(name)", "syncgate.service": "\(service.name)"])
        return Response(status: .noContent)
    }

    func pause(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let service = try context.service(granting: .admin)
        _ = try RequestReader(request: request).query(allowed: [])
        let name = try context.parameters.require("name")
        guard try await administration.pause(name: name) else { throw Self.unknown(name) }
        context.logger.notice("webhook paused", metadata: ["syncgate.webhook": "\(name)", "syncgate.service": "\(service.name)"])
        return try await subscription(name)
    }

    func resume(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let service = try context.service(granting: .admin)
        _ = try RequestReader(request: request).query(allowed: [])
        let name = try context.parameters.require("name")
        guard try await administration.resume(name: name) else { throw Self.unknown(name) }
        context.logger.notice("webhook resumed", metadata: ["syncgate.webhook": "\(name)", "syncgate.service": "\(service.name)"])
        return try await subscription(name)
    }

    func replay(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let service = try context.service(granting: .admin)
        _ = try RequestReader(request: request).query(allowed: [])
        let name = try context.parameters.require("name")
        let body = try await object(request)
        guard let text = body["from"]?.stringValue, let from = Timestamp(rfc3339: text) else {
            throw ProtocolError(.validationError, "'from' must be an RFC 3339 time, e.g. 2026-11-27T10:00:00Z")
        }
        guard let count = try await administration.replay(name: name, from: from) else { throw Self.unknown(name) }
        context.logger.notice("webhook replayed", metadata: [
            "syncgate.webhook": "\(name)", "syncgate.service": "\(service.name)", "syncgate.replayed": "\(count)", "syncgate.from": "\(text)",
        ])
        return .json(.object(["replayed": .int(Int64(count))]))
    }

    func subscription(_ name: String) async throws -> Response {
        guard let found = try await administration.list().first(where: { $0["name"]?.stringValue == name }) else { throw Self.unknown(name) }
        return .json(found)
    }

    func object(_ request: Request) async throws -> JSONObject {
        let bytes = try await readBody(request)
        guard let value = try? JSONParser().parse(Array(bytes.readableBytesView)), case .object(let object) = value else {
            throw ProtocolError(.validationError, "the body must be a JSON object")
        }
        return object
    }

    func strings(_ value: JSONValue?, _ name: String) throws(ProtocolError) -> [String]? {
        guard let value, value != .null else { return nil }
        guard let array = value.arrayValue, array.count <= 100 else { throw ProtocolError(.validationError, "'\(name)' must be an array of at most 100 strings") }
        return try array.map { item throws(ProtocolError) in
            guard let text = item.stringValue, (1...256).contains(text.utf8.count) else {
                throw ProtocolError(.validationError, "'\(name)' must hold strings of 1 to 256 bytes")
            }
            return text
        }
    }

    static func unknown(_ name: String) -> ProtocolError {
        ProtocolError(.notFound, "no webhook subscription is named '\(name)'")
    }
}
