import HTTPTypes
public import Hummingbird
import Logging
import SyncGateCore
import SyncGateStorage

/// Turns every failure into the protocol's error body, `{"error": {code, message, retryable}}`,
/// including unknown routes and framework errors; unexpected errors become `500 INTERNAL`
/// without leaking their details.
public struct ProtocolErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    let retryAfterSeconds: Int

    public init(retryAfterSeconds: Int) {
        self.retryAfterSeconds = retryAfterSeconds
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            let protocolError = Self.protocolError(for: error, retryAfterSeconds: retryAfterSeconds)
            if protocolError.code == .internal {
                context.logger.error("request failed", metadata: ["syncgate.error": "\(String(reflecting: error))"])
            }
            return Self.response(for: protocolError)
        }
    }

    static func protocolError(for error: any Error, retryAfterSeconds: Int) -> ProtocolError {
        switch error {
        case let error as ProtocolError:
            return error
        case let error as CursorError:
            return error.protocolError
        case let error as StoreUnavailableError:
            return ProtocolError(.unavailable, "the database is unavailable; retry later (\(error.reason))", retryAfterSeconds: retryAfterSeconds)
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

    static func response(for error: ProtocolError) -> Response {
        var headers: HTTPFields = [.contentType: "application/json; charset=utf-8"]
        if let seconds = error.retryAfterSeconds { headers[.retryAfter] = "\(seconds)" }
        return Response(
            status: HTTPResponse.Status(code: error.code.httpStatus),
            headers: headers,
            body: ResponseBody(byteBuffer: ByteBuffer(string: error.body.serialized()))
        )
    }
}

extension Response {
    /// A JSON response from a ``JSONValue``.
    static func json(_ value: JSONValue, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: value.serialized())))
    }
}
