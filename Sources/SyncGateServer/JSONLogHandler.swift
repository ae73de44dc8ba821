import Foundation
package import Logging
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
package struct JSONLogHandler: LogHandler {
    package var logLevel: Logger.Level = .info
    package var metadata: Logger.Metadata = [:]
    package var metadataProvider: Logger.MetadataProvider?
    let label: String
    let write: @Sendable (String) -> Void

    package init(label: String, metadataProvider: Logger.MetadataProvider? = nil, write: @escaping @Sendable (String) -> Void = JSONLogHandler.standardError) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.write = write
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
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

    package static let standardError: @Sendable (String) -> Void = { line in
        FileHandle.standardError.write(Data(line.utf8))
    }
}

extension Logger.MetadataProvider {
    /// `trace_id` and `span_id` of the current span, read from the W3C `traceparent` the
    /// process's tracer writes (nothing with the no-op tracer, or outside a span).
    package static let traceIDs = Logger.MetadataProvider {
        guard let context = ServiceContext.current else { return [:] }
        // traceparent: version-traceid-spanid-flags
        let parts = InstrumentationSystem.tracer.carrier(of: context)["traceparent"]?.split(separator: "-") ?? []
        guard parts.count == 4 else { return [:] }
        return ["trace_id": "\(parts[1])", "span_id": "\(parts[2])"]
    }
}
