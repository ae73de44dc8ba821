import Hummingbird
import Logging
import NIOCore
import SyncGateCore
import SyncGateHTTP
import SyncGateWire
import SyncGateStorage

/// The seed apps' own sync routes (docs/dialects.md): thin translations onto the same pipeline
/// as `/v1`. A push is one durable job applied by a worker with the configured policies; pulls
/// read the same feeds, by time (``DialectStore/changesSince(_:)``).
///
/// These clients were written against servers that ignored what they did not know: unknown
/// query parameters are ignored here too, and the device id is optional except on a push.
struct DialectRoutes: Sendable {
    let sync: SyncRoutes
    let store: DialectStore
    var configuration: FrontConfiguration { sync.configuration }

    /// `POST /sync/push` (diet tracker).
    func dietPush(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let userID = try context.userID()
        let body = try await sync.readBody(request)
        let push = try DietTrackerDialect.push(body: body.readableBytesView, limits: configuration.pushLimits, receivedAt: .now())
        let deviceID: String
        if let given = push.deviceID {
            deviceID = given
        } else if request.headers[RequestReader.deviceIDField] != nil {
            deviceID = try RequestReader(request: request).deviceID()
        } else {
            throw ProtocolError(.validationError, "deviceId (or the X-Device-Id header) is required")
        }
        guard !push.operations.isEmpty else {
            return .json(DietTrackerDialect.response(changes: [], results: [], serverTime: .now()))
        }
        // These clients expect the outcome in the answer: wait as long as a /v1 push may. A push
        // still unfinished then is durable and will apply; the client's resend of the same body
        // answers from it (the derived keys make the resend a duplicate).
        let (_, job) = try await sync.enqueue(
            push.operations, userID: userID, deviceID: deviceID, wait: configuration.maximumPushWaitMilliseconds, logger: context.logger
        )
        guard case .finished(let job) = job else {
            throw ProtocolError(.unavailable, "the push is queued but not applied yet; send it again", retryAfterSeconds: configuration.retryAfterSeconds)
        }
        guard job.state == .done, case let results = try job.decodedResults(), results.count == push.changes.count else {
            // Dead after every retry: nothing of it took effect.
            throw ProtocolError(.unavailable, "the push could not be applied; send it again", retryAfterSeconds: configuration.retryAfterSeconds)
        }
        return .json(DietTrackerDialect.response(changes: push.changes, results: results, serverTime: .now()))
    }

    /// `GET /sync/pull?since=&collections=&limit=&cursor=` (diet tracker). While `hasMore`, the
    /// answer's `cursor` (its `serverTime`) reads the next page: a client that pages by `cursor`
    /// and keeps `since` gets the same pages as one that sends `serverTime` back as `since`.
    func dietPull(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let userID = try context.userID()
        var parameters = Self.parameters(request)
        if let cursor = parameters["cursor"], !cursor.isEmpty { parameters["since"] = cursor }
        var types: Set<String>?
        // Empty is omitted, as the Express server's `req.query.collections ? … : all` read it.
        if let list = parameters["collections"], !list.isEmpty {
            let names = list.split(separator: ",").map(String.init)
            guard !names.isEmpty, names.count <= 100, names.allSatisfy({ IdentifierLimits.isValid($0, length: 1...IdentifierLimits.entityType) }) else {
                throw ProtocolError(.validationError, "'collections' must be a comma-separated list of 1 to 100 collection names")
            }
            types = Set(names.map(DietTrackerDialect.entityType(ofCollection:)))
        }
        let limit = try RequestReader.integer(parameters, "limit", in: 1...configuration.maximumPullLimit, default: configuration.maximumPullLimit)
        let page = try await store.changesSince(SinceQuery(userID: userID, since: try Self.since(parameters), entityTypes: types, limit: limit))
        let serverTime = JSONValue.string(Timestamp(millisecondsSinceEpoch: page.serverTime).rfc3339)
        var answer: JSONObject = ["changes": .array(page.changes.map(DietTrackerDialect.change)), "serverTime": serverTime, "hasMore": .bool(page.hasMore)]
        if page.hasMore { answer["cursor"] = serverTime }
        return .json(.object(answer))
    }

    /// `GET|POST /sync/full?household_id=` (both apps): every live document, and the time to
    /// pull on from.
    func full(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let userID = try context.userID()
        let household = try Self.household(Self.parameters(request), required: false)
        let documents = try await store.liveDocuments(userID: userID, household: household, types: nil)
        return .json(DietTrackerDialect.full(documents))
    }

    /// `GET /api/sync/changes?since=&household_id=` (PantryPal): one household's changes. An
    /// answer holds at most a page (the configured maximum pull limit); the client treats more
    /// than 100 changes as its cue to sync in full, and any shorter answer's `serverTime` is
    /// exact too.
    func pantryChanges(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let userID = try context.userID()
        let parameters = Self.parameters(request)
        let household = try Self.household(parameters, required: true)
        let page = try await store.changesSince(
            SinceQuery(userID: userID, since: try Self.since(parameters), household: household, limit: configuration.maximumPullLimit)
        )
        return .json([
            "changes": .array(page.changes.map(PantryPalDialect.change)),
            "serverTime": .string(Timestamp(millisecondsSinceEpoch: page.serverTime).rfc3339),
        ])
    }

    // MARK: - Parameters

    /// The query parameters; the last of a repeated one wins, as Express's did.
    static func parameters(_ request: Request) -> [String: String] {
        var parameters: [String: String] = [:]
        for (key, value) in request.uri.queryParameters { parameters[String(key)] = String(value) }
        return parameters
    }

    /// `since` (or the diet tracker's `cursor`): an RFC 3339 time (what `serverTime` was), absent
    /// or empty for everything.
    static func since(_ parameters: [String: String]) throws(ProtocolError) -> Int64? {
        guard let text = parameters["since"], !text.isEmpty else { return nil }
        guard text.utf8.count <= 64, let time = Timestamp(rfc3339: text) else {
            throw ProtocolError(.validationError, "'since' (or 'cursor') must be an RFC 3339 time, as the last serverTime")
        }
        return time.millisecondsSinceEpoch
    }

    static func household(_ parameters: [String: String], required: Bool) throws(ProtocolError) -> String? {
        guard let text = parameters["household_id"], !text.isEmpty else {
            if required { throw ProtocolError(.validationError, "'household_id' is required") }
            return nil
        }
        guard IdentifierLimits.hasLength(text, in: 1...IdentifierLimits.householdID) else {
            throw ProtocolError(.validationError, "'household_id' must be 1 to \(IdentifierLimits.householdID) characters")
        }
        return text
    }
}
