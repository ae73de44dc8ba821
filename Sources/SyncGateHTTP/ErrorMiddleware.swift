package import HTTPTypes
public import Hummingbird
import NIOCore
import Logging
import Synchronization
import SyncGateCore
package import SyncGateWire
import SyncGateStorage

/// A protocol error renders itself: the status of its code and
/// `{"error": {"code", "message", "retryable"}}`, with `Retry-After` for 429 and 503.
extension ProtocolError: HTTPResponseError {
    package var status: HTTPResponse.Status { HTTPResponse.Status(code: code.httpStatus) }

    package func response(from request: Request, context: some RequestContext) throws -> Response {
        response(to: request.headers)
    }

    /// The answer to a request with `headers`: a 401 carries its `WWW-Authenticate` challenge.
    func response(to headers: HTTPFields) -> Response {
        var fields: HTTPFields = [.contentType: "application/json; charset=utf-8"]
        if let seconds = retryAfterSeconds { fields[.retryAfter] = "\(seconds)" }
        if code == .unauthenticated { fields[.wwwAuthenticate] = Self.bearerChallenge(authorization: headers[.authorization], reason: message) }
        return Response(status: status, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(bytes: body.serializedBytes())))
    }

    /// The challenge of a 401 (RFC 6750 section 3): an error code only when the request used the
    /// Bearer scheme, `invalid_request` when it carried no token, `invalid_token` when the token
    /// was refused, with the reason as `error_description` (printable ASCII, no quote or backslash).
    static func bearerChallenge(authorization: String?, reason: String) -> String {
        let challenge = #"Bearer realm="syncgate""#
        let words = (authorization ?? "").split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard words.first?.lowercased() == "bearer" else { return challenge }
        let error = words.count == 2 ? "invalid_token" : "invalid_request"
        let description = String(String.UnicodeScalarView(reason.unicodeScalars.compactMap { scalar -> Unicode.Scalar? in
            guard (0x20...0x7E).contains(scalar.value) else { return nil }
            return scalar == "\"" ? "'" : scalar == "\\" ? "/" : scalar
        }))
        return challenge + #", error="\#(error)", error_description="\#(description)""#
    }
}

/// Turns every other failure into a protocol error: unknown routes, framework errors, cursor
/// errors, an unreachable database (`503 UNAVAILABLE`) and bugs (`500 INTERNAL`, logged, without
/// their details on the wire).
///
/// A known path asked with a method it does not take is `405 METHOD_NOT_ALLOWED` with `Allow`:
/// Hummingbird's router answers both that and an unknown path with a 404, so the middleware looks
/// the path up in `routes` (filled once the router has its routes).
package struct ProtocolErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    let retryAfterSeconds: Int
    let routes: RouteMethods
    let unavailableLog = LogThrottle(interval: .seconds(10))

    package init(retryAfterSeconds: Int, routes: RouteMethods = RouteMethods()) {
        self.retryAfterSeconds = retryAfterSeconds
        self.routes = routes
    }

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            return answer(error, to: request, context: context)
        }
    }

    /// The response to a request that failed with `error`. Out of line: its temporaries would
    /// otherwise sit in the async frame of its caller (`FrontMiddleware.handle` on the front),
    /// which every waiting long-poll keeps.
    @inline(never)
    func answer(_ error: any Error, to request: Request, context: Context) -> Response {
        if let error = error as? HTTPError, error.status == .notFound {
            guard let allowed = routes.methods(forPath: request.uri.path) else {
                return ProtocolError(.notFound, "no such route").response(to: request.headers)
            }
            var response = ProtocolError(.methodNotAllowed, "\(request.method) is not allowed here; allowed: \(allowed)").response(to: request.headers)
            response.headers[.allow] = allowed
            return response
        }
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
        return protocolError.response(to: request.headers)
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
        case is NIOTooManyBytesError:
            // A body read with a cap (the admin API's and console's) that passed it.
            return ProtocolError(.payloadTooLarge, "request body is too large")
        case let error as HTTPError:
            switch error.status.code {
            case 404: return ProtocolError(.notFound, "no such route")
            case 405: return ProtocolError(.methodNotAllowed, "method not allowed")
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
    package static func json(_ value: JSONValue, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        json(bytes: value.serializedBytes(), status: status, headers: headers)
    }

    /// A body already written as JSON.
    package static func json(bytes: [UInt8], status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
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

/// The methods each route of a router answers, by path pattern: for `405` with `Allow`.
package final class RouteMethods: Sendable {
    private let table = Mutex<[(path: RouterPath, methods: Set<String>)]>([])

    package init() {}

    /// Records a router's routes (`Router.routes`); a GET route answers HEAD too.
    package func record(_ routes: [(path: RouterPath, method: HTTPRequest.Method)]) {
        var methods: [String: (path: RouterPath, methods: Set<String>)] = [:]
        for route in routes {
            methods[route.path.description, default: (route.path, [])].methods.insert(route.method.rawValue)
            if route.method == .get { methods[route.path.description]!.methods.insert("HEAD") }
        }
        table.withLock { $0 = Array(methods.values) }
    }

    /// The `Allow` value for `path` (methods sorted, comma-separated), or `nil` for no route.
    package func methods(forPath path: String) -> String? {
        let segments = path.split(separator: "/")
        let matching = table.withLock { routes in
            routes.filter { route in
                route.path.components.count == segments.count && zip(route.path.components, segments).allSatisfy { $0 ~= $1 }
            }.flatMap(\.methods)
        }
        return matching.isEmpty ? nil : Set(matching).sorted().joined(separator: ", ")
    }
}
