import CoreMetrics
import HTTPTypes
package import Hummingbird
import Logging
import Metrics
import Synchronization
import SyncGateStorage
import Tracing

/// What inner middleware learn about a request that the outer ones report: the context is a
/// value passed inwards, so the authenticator's user reaches the request log through this box.
package final class RequestNotes: Sendable {
    private let notes = Mutex<(user: String?, service: String?)>((nil, nil))

    package init() {}

    package var userID: String? {
        get { notes.withLock { $0.user } }
        set { notes.withLock { $0.user = newValue } }
    }

    /// The name of the service key that authenticated the request.
    package var service: String? {
        get { notes.withLock { $0.service } }
        set { notes.withLock { $0.service = newValue } }
    }
}

/// Observes every request: a server span (joining the caller's trace when it sends
/// `traceparent`), `syncgate_http_requests_total` and `syncgate_http_request_duration_seconds`
/// by route, method and status, and one log line at info with route, status, duration and user
/// (never the token).
///
/// Hummingbird has a `TracingMiddleware` and a `MetricsMiddleware`, but they use the process-wide
/// tracer (tests could not observe one app's trace beside others) and OpenTelemetry metric names
/// with dots, which are not valid Prometheus names; this does the three with an injected tracer
/// and the names of ``MetricName``.
struct RequestObservation: Sendable {
    typealias Context = SyncRequestContext
    let tracer: any Tracer
    let requests = MetricHandles<RequestKey, Counter> { key in
        Counter(label: MetricName.httpRequests, dimensions: [("route", key.route), ("method", key.method), ("status", String(key.status))])
    }
    let durations = MetricHandles<RequestKey, Metrics.Timer> { key in
        Metrics.Timer(label: MetricName.httpRequestDuration, dimensions: [("route", key.route), ("method", key.method)])
    }

    static let methods: Set<String> = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

    struct RequestKey: Hashable, Sendable {
        var route: String
        var method: String
        var status: Int = 0
    }

    /// Starts observing `request`: its start time and its server span.
    @inline(never)
    func begin(_ request: Request) -> (started: ContinuousClock.Instant, span: any Span) {
        let started = ContinuousClock.now
        var parent = ServiceContext.current ?? .topLevel
        tracer.extract(request.headers, into: &parent, using: HTTPFieldsExtractor())
        let span = tracer.startSpan("HTTP \(request.method.rawValue)", context: parent, ofKind: .server)
        span.attributes["http.request.method"] = request.method.rawValue
        span.attributes["url.path"] = request.uri.path
        return (started, span)
    }

    /// Ends observing `request` with `response`: now for a body of known length, once written for
    /// a streamed one.
    @inline(never)
    func end(_ response: Response, request: Request, context: Context, started: ContinuousClock.Instant, span: any Span) -> Response {
        let status = response.status
        if response.body.contentLength != nil {
            // A body of known length (every JSON answer, held whole): counted and timed now and
            // left as it is, so Hummingbird writes its head and body in one write. Wrapped in a
            // closure, as a streamed body must be, it went out in two: the head, then the body
            // (ResponseWriteTests).
            finish(request, context: context, status: status, started: started, span: span)
            return response
        }
        // Event streams and other bodies of unknown length: counted and timed when written.
        var response = response
        response.body = response.body.afterWriting {
            finish(request, context: context, status: status, started: started, span: span)
        }
        return response
    }

    private func finish(_ request: Request, context: Context, status: HTTPResponse.Status, started: ContinuousClock.Instant, span: any Span) {
        let route = context.endpointPath ?? "unknown"
        let duration = started.duration(to: .now)
        span.operationName = "\(request.method.rawValue) \(route)"
        span.attributes["http.route"] = route
        span.attributes["http.response.status_code"] = Int(status.code)
        if status.code >= 500 { span.setStatus(.init(code: .error)) }
        span.end()
        // Labels take bounded values only: a client can send any method name.
        let method = Self.methods.contains(request.method.rawValue) ? request.method.rawValue : "other"
        requests[RequestKey(route: route, method: method, status: status.code)].increment()
        durations[RequestKey(route: route, method: method)].record(duration: duration)
        guard context.logger.logLevel <= .info else { return }
        var metadata: Logger.Metadata = [
            "http.method": "\(method)", "http.route": "\(route)", "http.status": "\(status.code)",
            "http.duration_ms": "\(Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15)",
        ]
        let (user, service) = (context.notes.userID, context.notes.service)
        if let user { metadata["syncgate.user"] = "\(user)" }
        if let service { metadata["syncgate.service_key"] = "\(service)" }
        // Inside the span, so a JSON log line carries its trace id.
        ServiceContext.withValue(span.context) {
            context.logger.info("request", metadata: metadata)
        }
    }
}

/// Reads a trace context (`traceparent`, `tracestate`, …) from request headers.
struct HTTPFieldsExtractor: Extractor {
    func extract(key: String, from headers: HTTPFields) -> String? {
        HTTPField.Name(key).flatMap { headers[$0] }
    }
}

/// Long-polls and event streams open now, by kind.
enum LiveConnectionGauge {
    static let longPolls = Meter(label: MetricName.liveConnections, dimensions: [("kind", "long_poll")])
    static let events = Meter(label: MetricName.liveConnections, dimensions: [("kind", "events")])
}

extension ResponseBody {
    /// The same body, then `done` once it is written or its writing failed (Hummingbird's own
    /// `withPostWriteClosure` is package-internal).
    func afterWriting(_ done: @escaping @Sendable () -> Void) -> ResponseBody {
        let body = self
        return ResponseBody(contentLength: body.contentLength) { writer in
            defer { done() }
            try await body.write(writer)
        }
    }
}
