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
///   With `household_id` instead, every operation goes into that household, as a job of its
///   owner (the one member who may always write there).
/// - `GET /v1/service/jobs/{id}?user_id=` (`write`): such a job's status.
/// - `GET /v1/service/pull?user_id=` (`read`): a page of what the user reads (their feed and
///   their households'), by the same opaque cursor as a device's pull.
/// - `GET /v1/service/entity?user_id=|household_id=&entity_type=&entity_id=` (`read`): one entity
///   as it stands now, live or deleted, in a pulled change's shape.
/// - `GET /v1/service/data?user_id=|household_id=` (`read`): a user's or a household's live
///   entities, a page at a time in (type, id) order.
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
        let root = document.objectValue
        var push = try PushRequest(document: document, limits: limits, receivedAt: .now())
        let userID: String
        switch (root?["user_id"], root?["household_id"]) {
        case (let user?, nil):
            userID = try Self.userID(user)
            try service.check(reaching: .user(userID))
        case (nil, let household?):
            let id = try Self.householdID(household)
            try service.check(reaching: .household(id))
            push.operations = try Self.intoHousehold(id, push.operations)
            userID = try await owner(of: id)
        default:
            throw ProtocolError(.validationError, "give exactly one of 'user_id' and 'household_id'")
        }
        return try await sync.answerPush(push.operations, userID: userID, deviceID: service.origin, wait: wait, logger: context.logger) { id in
            Self.statusURL(of: id, userID: userID)
        }
    }

    /// The operations of a household push, each in `household` (named there or not).
    static func intoHousehold(_ household: String, _ operations: [SyncOperation]) throws(ProtocolError) -> [SyncOperation] {
        var placed = operations
        for index in placed.indices {
            // By bytes: another spelling of the id is another household to the databases.
            guard let named = placed[index].householdID else {
                placed[index].householdID = household
                continue
            }
            guard named.sameBytes(as: household) else {
                throw ProtocolError(.validationError, "operations[\(index)].household_id is '\(named)' in a push into household '\(household)'")
            }
        }
        return placed
    }

    /// The owner of a live household: a household push is a job of theirs.
    func owner(of household: String) async throws -> String {
        let key = EntityKey(scope: .household(household), entityType: EntityTypeConfig.BuiltIn.households.rawValue, entityID: household)
        guard let owner = try await sync.store.entity(key)?.data?["owner"]?.stringValue else {
            throw ProtocolError(.entityNotFound, "household '\(household)' does not exist or is archived")
        }
        return owner
    }

    /// A key with a reach follows the jobs of its users, and of the owners of its households
    /// only those it queued itself (a household push is a job of the owner's; the owner's own
    /// jobs carry their private documents in conflict answers).
    func check(_ service: AuthenticatedService, follows jobID: String?, of userID: String) async throws {
        guard let reach = service.reach, !reach.covers(.user(userID)) else { return }
        for household in reach.households.sorted() where (try? await owner(of: household))?.sameBytes(as: userID) == true {
            guard let id = jobID.flatMap({ Int64($0) }), let job = try await sync.store.job(id: id, userID: userID), job.deviceID == service.origin else {
                throw ProtocolError(.notFound, "no such job")
            }
            return
        }
        try service.check(reaching: .user(userID))
    }

    /// A push's `household_id`: a read's, and without ':' as an operation's.
    static func householdID(_ value: JSONValue) throws(ProtocolError) -> String {
        guard let text = value.stringValue else { throw ProtocolError(.validationError, "'household_id' must be a string") }
        let id = try identifier(["household_id": text], "household_id", maximumLength: IdentifierLimits.householdID)
        guard !id.utf8.contains(UInt8(ascii: ":")) else { throw ProtocolError(.validationError, "'household_id' must not contain ':'") }
        return id
    }

    func jobStatus(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let service = try context.service(granting: .write)
        let query = try RequestReader(request: request).query(allowed: ["user_id", "wait"])
        let userID = try Self.userID(query["user_id"].map(JSONValue.string))
        try await check(service, follows: context.parameters.get("id"), of: userID)
        let wait = try RequestReader.integer(query, "wait", in: 0...sync.configuration.maximumPushWaitMilliseconds, default: 0)
        return try await sync.answerJobStatus(context.parameters.get("id"), userID: userID, wait: wait)
    }

    func pull(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let service = try context.service(granting: .read)
        var parameters = try RequestReader(request: request).query(allowed: ["user_id", "cursor", "limit", "entity_types", "wait"])
        let userID = try Self.userID(parameters.removeValue(forKey: "user_id").map(JSONValue.string))
        try service.check(reaching: .user(userID))
        return try await sync.answerPull(parameters, userID: userID, deviceID: service.origin)
    }

    func entity(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let service = try context.service(granting: .read)
        let query = try RequestReader(request: request).query(allowed: ["user_id", "household_id", "entity_type", "entity_id"])
        let scope = try Self.scope(query)
        try service.check(reaching: scope)
        let type = try Self.identifier(query, "entity_type", maximumLength: IdentifierLimits.entityType)
        let id = try Self.identifier(query, "entity_id", maximumLength: IdentifierLimits.entityID)
        guard let entity = try await sync.store.entity(EntityKey(scope: scope, entityType: type, entityID: id)) else {
            throw ProtocolError(.entityNotFound, "no \(type) '\(id)' in \(Self.describe(scope))")
        }
        var output: [UInt8] = []
        entity.writeJSON(to: &output)
        return .json(bytes: output)
    }

    func data(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let service = try context.service(granting: .read)
        let query = try RequestReader(request: request).query(allowed: ["user_id", "household_id", "entity_types", "after", "limit"])
        let scope = try Self.scope(query)
        try service.check(reaching: scope)
        let limit = try RequestReader.integer(query, "limit", in: 1...sync.configuration.maximumPullLimit, default: sync.configuration.defaultPullLimit)
        let types = try RequestReader.entityTypes(query)
        let after = try query["after"].map(Self.position(decoding:))
        let entities = try await sync.store.currentEntities(in: scope, types: types, after: after, limit: limit + 1)
        let page = entities.prefix(limit)
        var output = Array(#"{"entities":["#.utf8)
        for (index, entity) in page.enumerated() {
            if index > 0 { output.append(UInt8(ascii: ",")) }
            entity.writeJSON(to: &output)
        }
        let next = page.last.map { EntityPosition(after: $0).opaque }
        let tail: JSONObject = ["has_more": .bool(entities.count > limit), "after": next.map(JSONValue.string) ?? .null]
        output.append(contentsOf: "],".utf8)
        output.append(contentsOf: JSONValue.object(tail).serializedBytes().dropFirst())
        return .json(bytes: output)
    }

    /// The scope a read names: exactly one of `user_id` and `household_id`.
    static func scope(_ query: [String: String]) throws(ProtocolError) -> Scope {
        switch (query["user_id"], query["household_id"]) {
        case (let user?, nil):
            return .user(try userID(.string(user)))
        case (nil, let household?):
            return .household(try identifier(["household_id": household], "household_id", maximumLength: IdentifierLimits.householdID))
        default:
            throw ProtocolError(.validationError, "give exactly one of 'user_id' and 'household_id'")
        }
    }

    static func describe(_ scope: Scope) -> String {
        switch scope {
        case .user(let id): "user '\(id)'"
        case .household(let id): "household '\(id)'"
        }
    }

    /// A required query parameter of 1 to `maximumLength` characters without control characters.
    static func identifier(_ query: [String: String], _ name: String, maximumLength: Int) throws(ProtocolError) -> String {
        guard let value = query[name] else { throw ProtocolError(.validationError, "missing query parameter '\(name)'") }
        guard IdentifierLimits.isValid(value, length: 1...maximumLength) else {
            throw ProtocolError(.validationError, "'\(name)' must be 1 to \(maximumLength) characters without control characters")
        }
        return value
    }

    static func position(decoding text: String) throws(ProtocolError) -> EntityPosition {
        guard let position = EntityPosition(opaque: text) else { throw ProtocolError(.validationError, "'after' is not a value this server gave") }
        return position
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
        guard let userID = value.stringValue, IdentifierLimits.isValidUserID(userID) else {
            throw ProtocolError(.validationError, "'user_id' must be a string of 1 to \(IdentifierLimits.userID) characters without control characters")
        }
        return userID
    }
}
