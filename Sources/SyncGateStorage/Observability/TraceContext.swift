package import Tracing

/// Moves a trace context in and out of the string pairs a job stores (W3C `traceparent` and
/// `tracestate` with OpenTelemetry), so a push's trace continues in the worker that applies it.
package struct TraceCarrier: Injector, Extractor {
    package init() {}

    package func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) {
        carrier[key] = value
    }

    package func extract(key: String, from carrier: [String: String]) -> String? {
        carrier[key]
    }
}

extension Tracer {
    /// The current task's trace context as string pairs (empty when there is no active span).
    package func carrier(of context: ServiceContext = .current ?? .topLevel) -> [String: String] {
        var carrier: [String: String] = [:]
        inject(context, into: &carrier, using: TraceCarrier())
        return carrier
    }

    /// The context a stored carrier describes (top level when it describes none).
    package func context(from carrier: [String: String]) -> ServiceContext {
        var context = ServiceContext.topLevel
        extract(carrier, into: &context, using: TraceCarrier())
        return context
    }
}
