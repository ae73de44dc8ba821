import HTTPTypes
public import Hummingbird
import Logging
import Synchronization
public import SyncGateCore
import SyncGateStorage

/// A protocol error renders itself: the status of its code and
/// `{"error": {"code", "message", "retryable"}}`, with `Retry-After` for 429 and 503.
extension ProtocolError: HTTPResponseError {
    public var status: HTTPResponse.Status { HTTPResponse.Status(code: code.httpStatus) }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        response
    }

    var response: Response {
        var headers: HTTPFields = [.contentType: "application/json; charset=utf-8"]
        if let seconds = retryAfterSeconds { headers[.retryAfter] = "\(seconds)" }
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: body.serializedBytes())))
    }
}

/// Turns every other failure into a protocol error: unknown routes, framework errors, cursor
/// errors, an unreachable database (`503 UNAVAILABLE`) and bugs (`500 INTERNAL`, logged, without
/// their details on the wire).
public struct ProtocolErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    let retryAfterSeconds: Int
    let unavailableLog = LogThrottle(interval: .seconds(10))

    public init(retryAfterSeconds: Int) {
        self.retryAfterSeconds = retryAfterSeconds
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            let protocolError = Self.protocolError(for: error, retryAfterSeconds: retryAfterSeconds)
            // Drivers' errors describe themselves without bound values (see PostgresFailure).
            if protocolError.code == .internal {
                context.logger.error("request failed", metadata: ["syncgate.error": "\(String(reflecting: error))"])
            } else if let error = error as? StoreUnavailableError, let suppressed = unavailableLog.admit() {
                // At most one line per interval: in an outage every request fails the same way.
                context.logger.warning("database unavailable", metadata: [
                    "syncgate.error": "\(error.reason)", "syncgate.suppressed_since_last": "\(suppressed)",
                ])
            }
            return protocolError.response
        }
    }

    static func protocolError(for error: any Error, retryAfterSeconds: Int) -> ProtocolError {
        switch error {
        case let error as ProtocolError:
            return error
        case let error as CursorError:
            return error.protocolError
        case is StoreUnavailableError:
            // The reason (which operation, how it failed) is logged, not sent.
            return ProtocolError(.unavailable, "the database is unavailable; retry later", retryAfterSeconds: retryAfterSeconds)
        case let error as HTTPError:
            switch error.status.code {
            case 404, 405: return ProtocolError(.notFound, "no such route")
            case 413: return ProtocolError(.payloadTooLarge, "request body is too large")
            case 400..<500: return ProtocolError(.validationError, error.body ?? "bad request")
            default: return ProtocolError(.internal, "internal error")
            }
        default:
            return ProtocolError(.internal, "internal error")
        }
    }
}

extension Response {
    /// A JSON response from a ``JSONValue``.
    static func json(_ value: JSONValue, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        json(bytes: value.serializedBytes(), status: status, headers: headers)
    }

    /// A body already written as JSON.
    static func json(bytes: [UInt8], status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}

/// Admits one event per interval and counts the ones it held back.
final class LogThrottle: Sendable {
    private let interval: Duration
    private let state = Mutex<(last: ContinuousClock.Instant?, suppressed: Int)>((nil, 0))

    init(interval: Duration) {
        self.interval = interval
    }

    /// The number suppressed since the last admitted event, or `nil` to stay quiet now.
    func admit(now: ContinuousClock.Instant = .now) -> Int? {
        state.withLock { state in
            if let last = state.last, last.duration(to: now) < interval {
                state.suppressed += 1
                return nil
            }
            defer { state = (now, 0) }
            return state.suppressed
        }
    }
}
