import CoreMetrics
import Foundation
import HTTPTypes
package import Hummingbird
package import Logging
package import NIOCore
import SyncGateCore
package import SyncGateWire
package import SyncGateStorage
import Tracing

/// `POST /v1/sync/push`, `GET /v1/jobs/{id}` and `GET /v1/sync/pull`.
///
/// The front only authenticates, checks shapes and limits, makes each push a durable job and
/// waits for its result: it never applies operations itself.
package struct SyncRoutes: Sendable {
    package let store: any FrontStore
    package let configuration: FrontConfiguration
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
        return try await answerPush(push.operations, userID: userID, deviceID: deviceID, wait: wait, logger: context.logger, statusURL: JobAnswer.statusURL(of:))
    }

    /// Queues a validated push and answers it: `200` with the results when the job finished
    /// within `wait`, else `202` with the job's id and `statusURL(id)` as its `Location`.
    func answerPush(
        _ operations: [SyncOperation], userID: String, deviceID: String, wait: Int, logger: Logger, statusURL: (Int64) -> String
    ) async throws -> Response {
        let (jobID, job) = try await enqueue(operations, userID: userID, deviceID: deviceID, wait: wait, logger: logger)
        if case .finished(let finished) = job {
            do {
                return .json(bytes: try Self.finishedAnswer(finished))
            } catch {
                // The push is durable: answer with its id; its status route reports the fault.
                logger.error("a finished push's results cannot be answered", metadata: [
                    "syncgate.job": "\(jobID)", "syncgate.error": "\(error)",
                ])
            }
        }
        let location = statusURL(jobID)
        let accepted = JobAnswer(jobID: jobID, state: job?.state ?? .queued, statusURL: location)
        return .json(accepted.json, status: .accepted, headers: [.location: location])
    }

    /// The body of a push, refused with 413 past the configured size.
    package func readBody(_ request: Request) async throws -> ByteBuffer {
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
    /// id, and where it stands once the wait ended (nil when `wait` was 0, or the wait failed:
    /// the push is durable, the client follows it by its id).
    package func enqueue(_ operations: [SyncOperation], userID: String, deviceID: String, wait: Int, logger: Logger) async throws -> (Int64, JobProgress?) {
        // Subscribed before the job exists: it may finish before the enqueue's answer arrives,
        // and its notification then answers the push without reading the job back.
        let subscription = wait > 0 ? store.notifier.subscribe(.init(devices: [DeviceKey(userID: userID, deviceID: deviceID)])) : nil
        defer { subscription?.cancel() }
        // The job stores the trace context: the worker's claim and apply spans join this trace.
        let enqueued = try await tracer.withSpan("enqueue", ofKind: .producer) { span in
            span.attributes["syncgate.operations"] = operations.count
            return try await store.enqueue(
                QueuedJob(
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
        do {
            let job = try await tracer.withSpan("wait for job") { span in
                span.attributes["syncgate.job"] = jobID
                return try await live.waitForJob(id: jobID, userID: userID, timeout: .milliseconds(wait), subscription: subscription)
            }
            return (jobID, job)
        } catch {
            logger.warning("waiting for a queued push failed; answering with its job id", metadata: [
                "syncgate.job": "\(jobID)", "syncgate.error": "\(error)",
            ])
            return (jobID, nil)
        }
    }

    func jobStatus(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let reader = RequestReader(request: request)
        let userID = try context.userID()
        let query = try reader.query(allowed: ["wait"])
        let wait = try RequestReader.integer(query, "wait", in: 0...configuration.maximumPushWaitMilliseconds, default: 0)
        return try await answerJobStatus(context.parameters.get("id"), userID: userID, wait: wait)
    }

    /// The job `idText` of `userID`, once it finished or `wait` ms passed.
    func answerJobStatus(_ idText: String?, userID: String, wait: Int) async throws -> Response {
        // Any id that is not one of the caller's jobs is simply not found.
        guard let text = idText, text.utf8.count <= 19, let id = Int64(text), id > 0 else {
            throw ProtocolError(.notFound, "no such job")
        }
        let job = wait > 0
            ? try await live.waitForJob(id: id, userID: userID, timeout: .milliseconds(wait))
            : try await store.job(id: id, userID: userID).map(JobProgress.init)
        switch job {
        case nil: throw ProtocolError(.notFound, "no such job")
        case .finished(let finished): return .json(bytes: try Self.finishedAnswer(finished))
        case .unfinished(let id, let state): return .json(JobAnswer(jobID: id, state: state).json)
        }
    }

    func pull(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let reader = RequestReader(request: request)
        let userID = try context.userID()
        let deviceID = try reader.deviceID()
        let parameters = try reader.query(allowed: ["cursor", "limit", "entity_types", "wait"])
        return try await answerPull(parameters, userID: userID, deviceID: deviceID, expiresAt: context.identity?.expiresAt)
    }

    /// A page of `userID`'s feeds by the pull parameters (`cursor`, `limit`, `entity_types`, `wait`).
    /// A long-poll waits no longer than its token is valid (`expiresAt`), as an event stream.
    func answerPull(_ parameters: [String: String], userID: String, deviceID: String, expiresAt: Date? = nil) async throws -> Response {
        let limit = try RequestReader.integer(parameters, "limit", in: 1...configuration.maximumPullLimit, default: configuration.defaultPullLimit)
        var wait = try RequestReader.integer(parameters, "wait", in: 0...configuration.maximumPullWaitMilliseconds, default: 0)
        if let expiresAt { wait = min(wait, Int(max(0, expiresAt.timeIntervalSinceNow) * 1000)) }
        let types = try RequestReader.entityTypes(parameters)
        let poll = LongPoll(userID: userID, deviceID: deviceID, cursor: parameters["cursor"] ?? "", limit: limit, entityTypes: types)
        guard wait > 0 else { return .json(bytes: Self.pageBody(try await live.pull(poll.query()))) }
        LiveConnectionGauge.longPolls.increment()
        defer { LiveConnectionGauge.longPolls.decrement() }
        let answer = try await live.waitForPull(poll, timeout: .milliseconds(wait))
        return .json(bytes: Self.pageBody(answer.page, cursor: answer.cursor))
    }

    // MARK: - Answers

    /// A finished job's ``JobAnswer``, its stored results written as they are once the parser
    /// has checked them (decoding a thousand results to write them again was most of a large
    /// push's answer).
    static func finishedAnswer(_ job: FinishedJob) throws -> [UInt8] {
        let results: [UInt8]
        do {
            results = try JSONParser(maximumDepth: 512).compacted(job.results)
        } catch {
            throw StoredDataError("job \(job.id): the stored results are not JSON (\(error))")
        }
        guard results.first == UInt8(ascii: "[") else { throw StoredDataError("job \(job.id): the stored results are not a JSON array") }
        return JobAnswer.finishedBytes(jobID: job.id, state: job.state, results: results)
    }

    /// The page as the wire's ``PullPage``, its changes written one by one, their documents as stored.
    /// `cursor`: `page.cursor` as text, when known already.
    static func pageBody(_ page: PullResult, cursor: String? = nil) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(256 + page.changes.reduce(0) { $0 + 160 + ($1.document?.bytes.count ?? 0) })
        let envelope = PullPage.Envelope(
            cursor: cursor ?? page.cursor.encoded(), hasMore: page.hasMore, forceResync: page.forceResync, scopesAdded: page.scopesAdded,
            scopesRemoved: page.scopesRemoved, deviceWatermark: page.deviceWatermark
        )
        PullPage.write(envelope, to: &output) { output in
            for (position, change) in page.changes.enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                change.write(to: &output)
            }
        }
        return output
    }
}
