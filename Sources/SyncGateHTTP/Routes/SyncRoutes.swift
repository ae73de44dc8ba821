import CoreMetrics
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import SyncGateCore
import SyncGateStorage
import Tracing

/// `POST /v1/sync/push`, `GET /v1/jobs/{id}` and `GET /v1/sync/pull`.
///
/// The front only authenticates, checks shapes and limits, makes each push a durable job and
/// waits for its result: it never applies operations itself.
struct SyncRoutes: Sendable {
    let store: any FrontStore
    let configuration: FrontConfiguration
    let live: LiveUpdates
    let tracer: any Tracer

    func push(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let reader = RequestReader(request: request)
        let userID = try context.userID()
        let deviceID = try reader.deviceID()
        let query = try reader.query(allowed: ["wait"])
        let wait = try RequestReader.integer(query, "wait", in: 0...configuration.maximumPushWaitMilliseconds, default: configuration.defaultPushWaitMilliseconds)

        let body = try await readBody(request)
        let push = try PushRequest(body: body.readableBytesView, limits: configuration.pushLimits, receivedAt: .now())
        let (jobID, job) = try await enqueue(push.operations, userID: userID, deviceID: deviceID, wait: wait, logger: context.logger)
        if let job, job.state.isFinished {
            return .json(bytes: try Self.finishedJobBody(job))
        }
        let statusURL = "/v1/jobs/\(jobID)"
        var accepted = Self.jobBody(job ?? Self.queued(jobID, userID: userID, deviceID: deviceID)).objectValue ?? [:]
        accepted["status_url"] = .string(statusURL)
        return .json(.object(accepted), status: .accepted, headers: [.location: statusURL])
    }

    /// The body of a push, refused with 413 past the configured size.
    func readBody(_ request: Request) async throws -> ByteBuffer {
        if let length = request.headers[.contentLength].flatMap(Int.init), length > configuration.maximumBodyBytes {
            throw ProtocolError(.payloadTooLarge, "request body is \(length) bytes (at most \(configuration.maximumBodyBytes))")
        }
        do {
            return try await request.body.collect(upTo: configuration.maximumBodyBytes)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw ProtocolError(.payloadTooLarge, "request body is larger than \(configuration.maximumBodyBytes) bytes")
        } catch is NIOTooManyBytesError {
            // A chunked body (no Content-Length) passing the limit.
            throw ProtocolError(.payloadTooLarge, "request body is larger than \(configuration.maximumBodyBytes) bytes")
        }
    }

    /// Makes `operations` one durable job and waits up to `wait` ms for it to finish: the job's
    /// id, and its snapshot unless the wait ended first (or was 0).
    func enqueue(_ operations: [SyncOperation], userID: String, deviceID: String, wait: Int, logger: Logger) async throws -> (Int64, JobSnapshot?) {
        // Subscribed before the job exists: it may finish before the enqueue's answer arrives,
        // and its notification then answers the push without reading the job back.
        let subscription = wait > 0 ? store.notifier.subscribe(.init(devices: [DeviceKey(userID: userID, deviceID: deviceID)])) : nil
        defer { subscription?.cancel() }
        // The job stores the trace context: the worker's claim and apply spans join this trace.
        let enqueued = try await tracer.withSpan("enqueue", ofKind: .producer) { span in
            span.attributes["syncgate.operations"] = operations.count
            return try await store.enqueue(
                NewJob(
                    userID: userID, deviceID: deviceID, operations: operations, maximumAttempts: configuration.maximumAttempts,
                    traceContext: tracer.carrier(of: span.context)
                ),
                limits: configuration.queueLimits
            )
        }
        let jobID: Int64
        switch enqueued {
        case .accepted(let id):
            jobID = id
        case .rateLimited(let queued):
            throw ProtocolError(.rateLimited, "\(queued) pushes of this user are still queued; retry later", retryAfterSeconds: configuration.retryAfterSeconds)
        case .overloaded(let depth):
            throw ProtocolError(.overloaded, "the server has \(depth) pushes queued; retry later", retryAfterSeconds: configuration.retryAfterSeconds)
        }
        logger.debug("push queued", metadata: ["syncgate.job": "\(jobID)", "syncgate.operations": "\(operations.count)"])
        // From here the push is durable: whatever happens, the client gets the job id.
        guard let subscription else { return (jobID, nil) }
        let job = try? await tracer.withSpan("wait for job") { span in
            span.attributes["syncgate.job"] = jobID
            return try await live.waitForJob(id: jobID, userID: userID, timeout: .milliseconds(wait), subscription: subscription)
        }
        return (jobID, job)
    }

    func jobStatus(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let reader = RequestReader(request: request)
        let userID = try context.userID()
        let query = try reader.query(allowed: ["wait"])
        let wait = try RequestReader.integer(query, "wait", in: 0...configuration.maximumPushWaitMilliseconds, default: 0)
        // Any id that is not one of the caller's jobs is simply not found.
        guard let text = context.parameters.get("id"), text.utf8.count <= 19, let id = Int64(text), id > 0 else {
            throw ProtocolError(.notFound, "no such job")
        }
        let job = wait > 0
            ? try await live.waitForJob(id: id, userID: userID, timeout: .milliseconds(wait))
            : try await store.job(id: id, userID: userID)
        guard let job else { throw ProtocolError(.notFound, "no such job") }
        return job.state.isFinished ? .json(bytes: try Self.finishedJobBody(job)) : .json(Self.jobBody(job))
    }

    func pull(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let reader = RequestReader(request: request)
        let userID = try context.userID()
        let deviceID = try reader.deviceID()
        let parameters = try reader.query(allowed: ["cursor", "limit", "entity_types", "wait"])
        let limit = try RequestReader.integer(parameters, "limit", in: 1...configuration.maximumPullLimit, default: configuration.defaultPullLimit)
        let wait = try RequestReader.integer(parameters, "wait", in: 0...configuration.maximumPullWaitMilliseconds, default: 0)
        var types: Set<String>?
        if let list = parameters["entity_types"] {
            let names = list.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            guard !names.isEmpty, names.count <= 100, names.allSatisfy({ (1...IdentifierLimits.entityType).contains($0.count) }) else {
                throw ProtocolError(.validationError, "'entity_types' must be a comma-separated list of 1 to 100 type names")
            }
            types = Set(names)
        }
        var cursor: SyncCursor?
        if let text = parameters["cursor"], !text.isEmpty {
            cursor = try SyncCursor.decode(text, expectedUserID: userID)
        }
        let query = PullQuery(userID: userID, deviceID: deviceID, cursor: cursor, limit: limit, entityTypes: types)
        let page: PullPage
        if wait > 0 {
            LiveConnectionGauge.longPolls.increment()
            defer { LiveConnectionGauge.longPolls.decrement() }
            page = try await live.waitForPull(query, timeout: .milliseconds(wait))
        } else {
            page = try await live.pull(query)
        }
        return .json(bytes: Self.pageBody(page))
    }

    // MARK: - Bodies

    static func queued(_ id: Int64, userID: String, deviceID: String) -> JobSnapshot {
        JobSnapshot(
            id: id, userID: userID, deviceID: deviceID, state: .queued, attempts: 0, maximumAttempts: 0,
            operationCount: 0, results: nil, lastError: nil, createdAt: .now(), finishedAt: nil
        )
    }

    /// The push response shape: results only once the job is `done` or `dead`.
    static func jobBody(_ job: JobSnapshot) -> JSONValue {
        var body: JSONObject = [
            "job_id": .string(String(job.id)),
            "status": .string(job.state.rawValue),
            "server_time": .string(Timestamp.now().rfc3339),
        ]
        if job.state.isFinished {
            body["results"] = .array((job.results ?? []).map(\.json))
        }
        return .object(body)
    }

    /// ``jobBody(_:)`` of a finished job as bytes, its stored results written as they are once the
    /// parser has checked them (decoding a thousand results to write them again was most of a
    /// large push's answer); keys in the writer's (sorted) order.
    static func finishedJobBody(_ job: JobSnapshot) throws -> [UInt8] {
        guard let stored = job.storedResults else { return jobBody(job).serializedBytes() }
        guard let results = try? JSONParser(maximumDepth: 512).compacted(stored), results.first == UInt8(ascii: "[") else {
            throw StoredDataError("job \(job.id): the stored results are not a JSON array")
        }
        var body: [UInt8] = []
        body.reserveCapacity(results.count + 128)
        body.append(contentsOf: #"{"job_id":""#.utf8)
        body.append(contentsOf: String(job.id).utf8)
        body.append(contentsOf: #"","results":"#.utf8)
        body.append(contentsOf: results)
        body.append(contentsOf: #","server_time":""#.utf8)
        body.append(contentsOf: Timestamp.now().rfc3339.utf8)
        body.append(contentsOf: #"","status":""#.utf8)
        body.append(contentsOf: job.state.rawValue.utf8)
        body.append(contentsOf: #""}"#.utf8)
        return body
    }

    /// The page as JSON bytes: the changes written one by one (their documents as stored), then
    /// the rest of the envelope, whose keys all sort after "changes".
    static func pageBody(_ page: PullPage) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(256 + page.changes.reduce(0) { $0 + 160 + ($1.document?.bytes.count ?? 0) })
        output.append(contentsOf: #"{"changes":["#.utf8)
        for (position, change) in page.changes.enumerated() {
            if position > 0 { output.append(UInt8(ascii: ",")) }
            change.write(to: &output)
        }
        output.append(contentsOf: "],".utf8)
        output.append(contentsOf: pageEnvelope(page).serializedBytes().dropFirst())
        return output
    }

    /// Everything of a page but its changes.
    static func pageEnvelope(_ page: PullPage) -> JSONValue {
        [
            "cursor": .string(page.cursor.encoded()),
            "has_more": .bool(page.hasMore),
            "force_resync": .bool(page.forceResync),
            "scopes": ["added": .array(page.scopesAdded.map(JSONValue.string)), "removed": .array(page.scopesRemoved.map(JSONValue.string))],
            "device_watermark": .string(String(page.deviceWatermark)),
            "server_time": .string(Timestamp.now().rfc3339),
        ]
    }
}
