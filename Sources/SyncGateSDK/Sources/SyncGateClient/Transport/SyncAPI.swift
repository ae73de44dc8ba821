import SyncGateWire
import Foundation
import Logging

/// The protocol's requests over a ``SyncTransport``: bearer token (refreshed once on a 401),
/// device id, bodies, and errors as ``SyncGateClientError``.
struct SyncAPI: Sendable {
    let transport: any SyncTransport
    let deviceID: String
    let tokens: TokenCache
    /// Extra time beyond a request's `wait` before the client gives up on the answer.
    let requestTimeout: Duration
    let logger: Logger
    /// Where each exchange reports whether the server answered.
    let status: StatusCenter

    /// `POST /v1/sync/push?wait=`: the job, finished (200) or not yet (202).
    func push(_ entries: [OutboxEntry], waitMilliseconds: Int) async throws -> JobAnswer {
        let response = try await send(
            method: "POST", path: "/v1/sync/push?wait=\(waitMilliseconds)",
            body: Array(OutboxEntry.pushBody(entries).utf8), waitMilliseconds: waitMilliseconds
        )
        guard response.status == 200 || response.status == 202 else { throw Self.error(for: response) }
        return try JobAnswer(json: try Self.json(response))
    }

    /// `GET /v1/jobs/{id}?wait=`; `nil` when the server does not know the job (404: pruned).
    func job(_ jobID: String, waitMilliseconds: Int) async throws -> JobAnswer? {
        let path = "/v1/jobs/\(jobID.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? jobID)?wait=\(waitMilliseconds)"
        let response = try await send(method: "GET", path: path, body: nil, waitMilliseconds: waitMilliseconds)
        if response.status == 404 { return nil }
        guard response.status == 200 else { throw Self.error(for: response) }
        return try JobAnswer(json: try Self.json(response))
    }

    /// `PUT /v1/devices/current/push`: this device's push address.
    func registerPush(_ registration: PushRegistration) async throws {
        let response = try await send(method: "PUT", path: "/v1/devices/current/push", body: registration.json.serializedBytes(), waitMilliseconds: 0)
        guard response.status == 200 else { throw Self.error(for: response) }
    }

    /// `DELETE /v1/devices/current/push`.
    func unregisterPush() async throws {
        let response = try await send(method: "DELETE", path: "/v1/devices/current/push", body: nil, waitMilliseconds: 0)
        guard response.status == 204 else { throw Self.error(for: response) }
    }

    /// A pull's answer: a page, or the server's refusal of the cursor.
    enum PullAnswer: Sendable, Hashable {
        case page(PullPage)
        case cursorInvalid
    }

    /// `GET /v1/sync/pull?cursor=&limit=&wait=`.
    func pull(cursor: String?, limit: Int, waitMilliseconds: Int = 0) async throws -> PullAnswer {
        var query = ["limit=\(limit)"]
        if let cursor { query.append("cursor=\(Self.percentEncoded(cursor))") }
        if waitMilliseconds > 0 { query.append("wait=\(waitMilliseconds)") }
        let response = try await send(method: "GET", path: "/v1/sync/pull?" + query.joined(separator: "&"), body: nil, waitMilliseconds: waitMilliseconds)
        status.update { $0.download?.bytes += response.body.count }
        return try Self.pullAnswer(response)
    }

    /// The cursor reset rule: 409 `CURSOR_INVALID` means start over; any other error is an error.
    static func pullAnswer(_ response: TransportResponse) throws -> PullAnswer {
        if response.status == 409, (try? json(response))?["error"]?["code"]?.stringValue == "CURSOR_INVALID" {
            return .cursorInvalid
        }
        guard response.status == 200 else { throw error(for: response) }
        return .page(try PullPage(json: try json(response)))
    }

    /// `GET /v1/sync/events`: the open stream, or an error for a refused one. The stream may stay
    /// silent for `idleTimeout` (the server sends a comment every 15 s) before the transport gives up.
    func events(idleTimeout: Duration) async throws -> TransportStream {
        // A 401 goes back to `authorized`, which refreshes the token and asks once more.
        let stream = try await authorized { token in
            let request = TransportRequest(
                method: "GET", path: "/v1/sync/events", headers: headers(token: token), timeout: max(requestTimeout, idleTimeout)
            )
            let stream = try await reaching { try await transport.stream(request) }
            return (stream.status, stream)
        }
        if stream.status == 200 {
            // A captive portal's or a proxy's page is a 200 too: only an event stream is one.
            let type = stream.headers["content-type"] ?? "none"
            guard type.lowercased().hasPrefix("text/event-stream") else {
                throw SyncGateClientError(.unexpectedAnswer, "the event stream answered 200 with content type \(type)", httpStatus: 200)
            }
            return stream
        }
        var body: [UInt8] = []
        for try await chunk in stream.body where body.count < 65_536 { body += chunk }
        throw Self.error(for: TransportResponse(status: stream.status, headers: stream.headers, body: body))
    }

    // MARK: - Requests

    private func send(method: String, path: String, body: [UInt8]?, waitMilliseconds: Int) async throws -> TransportResponse {
        try await authorized { token in
            var headers = headers(token: token)
            if body != nil { headers["content-type"] = "application/json" }
            let request = TransportRequest(
                method: method, path: path, headers: headers, body: body, timeout: requestTimeout + .milliseconds(waitMilliseconds)
            )
            let response = try await reaching { try await transport.send(request) }
            return (response.status, response)
        }
    }

    /// Runs one exchange with the transport, reporting the connection: connecting (after being
    /// offline), connected when an answer arrives, offline when none does.
    private func reaching<Answer>(_ exchange: () async throws -> Answer) async throws -> Answer {
        let connecting = status.update { status -> Bool in
            guard status.connection == .offline else { return false }
            status.connection = .connecting
            return true
        }
        do {
            let answer = try await exchange()
            status.update { $0.connection = .connected }
            return answer
        } catch is CancellationError {
            // Nothing was learnt about the server: back to offline if this exchange left it.
            if connecting { status.update { if $0.connection == .connecting { $0.connection = .offline } } }
            throw CancellationError()
        } catch {
            status.update { $0.connection = .offline }
            throw Self.transportError(error)
        }
    }

    /// Runs an exchange with the current token and, if the server answers 401, once more with a fresh one.
    private func authorized<Result>(_ exchange: (String) async throws -> (status: Int, result: Result)) async throws -> Result {
        let token = try await tokens.current()
        let first = try await exchange(token)
        guard first.status == 401 else { return first.result }
        logger.debug("token refused; asking the provider for a fresh one", metadata: ["syncgate.device": "\(deviceID)"])
        let fresh = try await tokens.refresh(replacing: token)
        let second = try await exchange(fresh)
        guard second.status == 401 else { return second.result }
        throw SyncGateClientError(.unauthenticated, "the server refused the token, also after a refresh", httpStatus: 401, serverCode: "UNAUTHENTICATED")
    }

    private func headers(token: String) -> [String: String] {
        ["authorization": "Bearer \(token)", "x-device-id": deviceID, "accept": "application/json"]
    }

    // MARK: - Answers

    static func json(_ response: TransportResponse) throws -> JSONValue {
        do {
            return try JSONValue(parsing: response.body)
        } catch {
            throw SyncGateClientError(.unexpectedAnswer, "HTTP \(response.status) with a body that is not JSON", httpStatus: response.status)
        }
    }

    /// The protocol's error body as an error, with `Retry-After`.
    static func error(for response: TransportResponse) -> SyncGateClientError {
        let body = try? JSONValue(parsing: response.body)
        let code = body?["error"]?["code"]?.stringValue
        let message = body?["error"]?["message"]?.stringValue ?? "HTTP \(response.status)"
        let retryAfter = response.headers["retry-after"].flatMap(retryAfterDuration)
        let clientCode: SyncGateClientError.Code = response.status == 401 ? .unauthenticated : .server
        return SyncGateClientError(clientCode, message, httpStatus: response.status, serverCode: code, retryAfter: retryAfter)
    }

    /// `Retry-After` in delta-seconds (what SyncGate sends), at most ``maximumRetryAfter``: a
    /// proxy's absurd value must neither stop sync for years nor overflow a sleep's deadline. An
    /// HTTP date is not understood and ignored.
    static func retryAfterDuration(_ value: String) -> Duration? {
        guard let seconds = Int(value.trimmingCharacters(in: .whitespaces)), seconds >= 0 else { return nil }
        return min(.seconds(seconds), maximumRetryAfter)
    }

    /// The longest `Retry-After` honoured.
    static let maximumRetryAfter: Duration = .seconds(3600)

    static func transportError(_ error: any Error) -> any Error {
        if error is CancellationError || error is SyncGateClientError { return error }
        return SyncGateClientError(.transport, "no answer from the server: \(error)")
    }

    static func percentEncoded(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}
