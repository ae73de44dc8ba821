import Foundation
import HTTPTypes
import Hummingbird
import SyncGateCore
import SyncGateStorage
import SyncGateWire

/// The service API: an app's own backend, authenticated by a service key, writes and reads a
/// user's data through the same pipeline as the user's devices.
///
/// - `POST /v1/service/push` (`write`): `{"user_id": …, "operations": [...]}` becomes one job of
///   that user, queued, applied and fed like a device's push (idempotency keys, conflict
///   policies, field rules, derived data, live wake-ups); its device is `service:<key name>`.
/// - `GET /v1/service/jobs/{id}?user_id=` (`write`): such a job's status.
/// - `GET /v1/service/pull?user_id=` (`read`): a page of what the user reads (their feed and
///   their households'), by the same opaque cursor as a device's pull.
package struct ServiceRoutes: Sendable {
    let sync: SyncRoutes

    func push(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let service = try context.service(granting: .write)
        let reader = RequestReader(request: request)
        let query = try reader.query(allowed: ["wait"])
        let wait = try RequestReader.integer(query, "wait", in: 0...sync.configuration.maximumPushWaitMilliseconds, default: sync.configuration.defaultPushWaitMilliseconds)
        let body = try await sync.readBody(request)
        let limits = sync.configuration.pushLimits
        let document = try PushRequest.parse(body.readableBytesView, limits: limits)
        let userID = try Self.userID(document.objectValue?["user_id"])
        let push = try PushRequest(document: document, limits: limits, receivedAt: .now())
        return try await sync.answerPush(push.operations, userID: userID, deviceID: service.origin, wait: wait, logger: context.logger) { id in
            Self.statusURL(of: id, userID: userID)
        }
    }

    func jobStatus(_ request: Request, context: SyncRequestContext) async throws -> Response {
        _ = try context.service(granting: .write)
        let query = try RequestReader(request: request).query(allowed: ["user_id", "wait"])
        let userID = try Self.userID(query["user_id"].map(JSONValue.string))
        let wait = try RequestReader.integer(query, "wait", in: 0...sync.configuration.maximumPushWaitMilliseconds, default: 0)
        return try await sync.answerJobStatus(context.parameters.get("id"), userID: userID, wait: wait)
    }

    func pull(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let service = try context.service(granting: .read)
        var parameters = try RequestReader(request: request).query(allowed: ["user_id", "cursor", "limit", "entity_types", "wait"])
        let userID = try Self.userID(parameters.removeValue(forKey: "user_id").map(JSONValue.string))
        return try await sync.answerPull(parameters, userID: userID, deviceID: service.origin)
    }

    /// RFC 3986's unreserved characters: everything else in a query value is percent-encoded.
    static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    /// Where a service follows its job: the user's id rides along, as a job is found by its user.
    static func statusURL(of jobID: Int64, userID: String) -> String {
        "/v1/service/jobs/\(jobID)?user_id=\(userID.addingPercentEncoding(withAllowedCharacters: unreserved) ?? "")"
    }

    /// The `user_id` a service acts for: a token's `sub` could be any 1–128 characters.
    static func userID(_ value: JSONValue?) throws(ProtocolError) -> String {
        guard let value, !value.isNull else { throw ProtocolError(.validationError, "missing field 'user_id'") }
        guard let userID = value.stringValue, IdentifierLimits.isValidUserID(userID),
            !userID.unicodeScalars.contains(where: IdentifierLimits.isControl)
        else {
            throw ProtocolError(.validationError, "'user_id' must be a string of 1 to \(IdentifierLimits.userID) characters without control characters")
        }
        return userID
    }
}
