/// The error codes of the wire protocol (PROTOCOL.md).
public enum ErrorCode: String, Sendable, CaseIterable {
    case validationError = "VALIDATION_ERROR"
    case unauthenticated = "UNAUTHENTICATED"
    case permissionDenied = "PERMISSION_DENIED"
    case notFound = "NOT_FOUND"
    case methodNotAllowed = "METHOD_NOT_ALLOWED"
    case cursorInvalid = "CURSOR_INVALID"
    case payloadTooLarge = "PAYLOAD_TOO_LARGE"
    case rateLimited = "RATE_LIMITED"
    case overloaded = "OVERLOADED"
    case unavailable = "UNAVAILABLE"
    case `internal` = "INTERNAL"
    case entityNotFound = "ENTITY_NOT_FOUND"
    /// The admin API: the job is in a state the action does not apply to.
    case stateConflict = "STATE_CONFLICT"

    /// The HTTP status for a request that fails as a whole with this code.
    public var httpStatus: Int {
        switch self {
        case .validationError: return 400
        case .unauthenticated: return 401
        case .permissionDenied: return 403
        case .notFound, .entityNotFound: return 404
        case .methodNotAllowed: return 405
        case .cursorInvalid, .stateConflict: return 409
        case .payloadTooLarge: return 413
        case .rateLimited: return 429
        case .overloaded, .unavailable: return 503
        case .internal: return 500
        }
    }

    /// `retryable` is true exactly for 429 and 5xx.
    public var isRetryable: Bool {
        httpStatus == 429 || httpStatus >= 500
    }
}

/// A request that fails as a whole: `{"error": {"code", "message", "retryable"}}`.
public struct ProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: ErrorCode
    public var message: String
    /// Seconds for the `Retry-After` header (429 and 503).
    public var retryAfterSeconds: Int?

    public init(_ code: ErrorCode, _ message: String, retryAfterSeconds: Int? = nil) {
        self.code = code
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
    }

    public var description: String { "\(code.rawValue): \(message)" }

    public var body: JSONValue {
        ["error": ["code": .string(code.rawValue), "message": .string(message), "retryable": .bool(code.isRetryable)]]
    }
}
