import Foundation
public import Logging
import SyncGateCore
import SyncGateWire
import SyncGateStorage
import Tracing

/// `SYNCGATE_LOG_FORMAT=json`: one JSON object per line on standard error — `time` (RFC 3339,
/// milliseconds), `level`, `message`, `label`, `source`, the metadata as string fields, and
/// `trace_id`/`span_id` when the line is written inside a span of a W3C tracer (OTLP).
///
/// swift-log ships only the text handler and none of the mirrored packages has a JSON one; the
/// line is built with SyncGateCore's serializer, which escapes whatever a message contains.
public struct JSONLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    let label: String
    let write: @Sendable (String) -> Void

    public init(label: String, metadataProvider: Logger.MetadataProvider? = nil, write: @escaping @Sendable (String) -> Void = JSONLogHandler.standardError) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.write = write
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var fields: JSONObject = [
            "time": .string(Timestamp.now().rfc3339),
            "level": .string(event.level.rawValue),
            "message": .string(event.message.description),
            "label": .string(label),
            "source": .string(event.source),
        ]
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        for (key, value) in merged where fields[key] == nil {
            fields[key] = .string(value.description)
        }
        write(JSONValue.object(fields).serialized() + "\n")
    }

    public static let standardError: @Sendable (String) -> Void = { line in
        FileHandle.standardError.write(Data(line.utf8))
    }
}

extension Logger.MetadataProvider {
    /// `trace_id` and `span_id` of the current span, read from the W3C `traceparent` the
    /// process's tracer writes (nothing with the no-op tracer, or outside a span).
    public static let traceIDs = Logger.MetadataProvider {
        guard let context = ServiceContext.current else { return [:] }
        // traceparent: version-traceid-spanid-flags
        let parts = InstrumentationSystem.tracer.carrier(of: context)["traceparent"]?.split(separator: "-") ?? []
        guard parts.count == 4 else { return [:] }
        return ["trace_id": "\(parts[1])", "span_id": "\(parts[2])"]
    }
}
