package import SyncGateWire
/// How a queued job's operations and a finished job's results are stored.
///
/// The payload has a storage format of its own, versioned apart from the wire format, so a later
/// release can change what a push may contain without making queued jobs unreadable:
///
/// - version 2 (written now): `{"v":2,"ops":[{"k","t","i","n","b","d","ts","h"}]}` — key, type,
///   id, intent (`c`/`u`/`d`), base version, data, client timestamp in milliseconds, household;
///   optionally `"tc"`: the push's trace context (string pairs such as W3C `traceparent`), so the
///   worker's spans join the push's trace. Releases that predate it ignore the key;
/// - version 1 (read only): the push's `operations` array in wire form, as releases before
///   version 2 stored it.
///
/// A payload that does not decode is a ``JobPayloadError``: its job goes `dead` on its own.
package enum JobCodec {
    package static let currentVersion: Int64 = 2

    package static func encode(_ operations: [SyncOperation], traceContext: [String: String] = [:]) -> String {
        let encoded: [JSONValue] = operations.map { operation in
            var object: JSONObject = [
                "k": .string(operation.idempotencyKey),
                "t": .string(operation.entityType),
                "i": .string(operation.entityID),
                "n": .string(intentCode(operation.intent)),
                "b": .int(operation.baseVersion),
                "ts": .int(operation.clientTimestamp.millisecondsSinceEpoch),
            ]
            if let data = operation.data { object["d"] = .object(data) }
            if let household = operation.householdID { object["h"] = .string(household) }
            return .object(object)
        }
        var envelope: JSONObject = ["v": .int(currentVersion), "ops": .array(encoded)]
        if !traceContext.isEmpty { envelope["tc"] = .object(JSONObject(uniqueKeysWithValues: traceContext.map { ($0.key, .string($0.value)) })) }
        return JSONValue.object(envelope).serialized()
    }

    package static func decode(_ text: String) throws(JobPayloadError) -> [SyncOperation] {
        try decodeJob(text).operations
    }

    /// The operations and the trace context (empty when none was stored, or it is malformed:
    /// a trace is worth losing, a job is not).
    package static func decodeJob(_ text: String) throws(JobPayloadError) -> (operations: [SyncOperation], traceContext: [String: String]) {
        let document: JSONValue
        do {
            // Documents nest at most the configured push depth (a few dozen) below the envelope.
            document = try JSONParser(maximumDepth: 1024).parse(text)
        } catch {
            throw JobPayloadError("the stored job payload is not JSON (\(error))")
        }
        if let legacy = document.arrayValue {
            return (try legacy.enumerated().map { index, value throws(JobPayloadError) in try decodeVersion1(value, index: index) }, [:])
        }
        guard let object = document.objectValue, let version = object["v"]?.integerValue else {
            throw JobPayloadError("the stored job payload has no format version")
        }
        guard version == 2 else {
            throw JobPayloadError("the stored job payload has format version \(version); this release reads versions 1 and 2")
        }
        guard let operations = object["ops"]?.arrayValue else {
            throw JobPayloadError("the stored job payload has no operations")
        }
        let decoded = try operations.enumerated().map { index, value throws(JobPayloadError) in try decodeVersion2(value, index: index) }
        let traceContext = (object["tc"]?.objectValue ?? [:]).reduce(into: [String: String]()) { pairs, field in
            if let value = field.value.stringValue { pairs[field.key] = value }
        }
        return (decoded, traceContext)
    }

    // MARK: - Results

    /// Results are stored in their wire form: what `GET /v1/jobs/{id}` answers.
    package static func encodeResults(_ results: [OperationResult]) -> String {
        JSONValue.array(results.map(\.json)).serialized()
    }

    package static func decodeResults(_ text: String) throws(JobPayloadError) -> [OperationResult] {
        guard let array = (try? JSONParser(maximumDepth: 1024).parse(text))?.arrayValue else {
            throw JobPayloadError("the stored job results are not a JSON array")
        }
        var results: [OperationResult] = []
        results.reserveCapacity(array.count)
        for (index, value) in array.enumerated() {
            do {
                results.append(try OperationResult(json: value))
            } catch {
                throw JobPayloadError("stored result \(index): \(error)")
            }
        }
        return results
    }

    // MARK: - Versions

    static func intentCode(_ intent: SyncOperation.Intent) -> String {
        switch intent {
        case .create: "c"
        case .update: "u"
        case .delete: "d"
        }
    }

    static func decodeVersion2(_ value: JSONValue, index: Int) throws(JobPayloadError) -> SyncOperation {
        let fields = try Fields(value, index: index)
        let intent: SyncOperation.Intent
        switch try fields.string("n") {
        case "c": intent = .create
        case "u": intent = .update
        case "d": intent = .delete
        case let other: throw JobPayloadError("stored operation \(index): unknown intent '\(other)'")
        }
        return SyncOperation(
            idempotencyKey: try fields.string("k"),
            entityType: try fields.string("t"),
            entityID: try fields.string("i"),
            intent: intent,
            baseVersion: try fields.integer("b"),
            data: try fields.document("d", required: intent != .delete),
            clientTimestamp: Timestamp(millisecondsSinceEpoch: try fields.integer("ts")),
            householdID: try fields.optionalString("h")
        )
    }

    static func decodeVersion1(_ value: JSONValue, index: Int) throws(JobPayloadError) -> SyncOperation {
        let fields = try Fields(value, index: index)
        guard let intent = SyncOperation.Intent(rawValue: try fields.string("intent")) else {
            throw JobPayloadError("stored operation \(index): unknown intent")
        }
        guard let timestamp = Timestamp(rfc3339: try fields.string("client_timestamp")) else {
            throw JobPayloadError("stored operation \(index): 'client_timestamp' is not a timestamp")
        }
        return SyncOperation(
            idempotencyKey: try fields.string("idempotency_key"),
            entityType: try fields.string("entity_type"),
            entityID: try fields.string("entity_id"),
            intent: intent,
            baseVersion: try fields.integer("base_version"),
            data: try fields.document("data", required: intent != .delete),
            clientTimestamp: timestamp,
            householdID: try fields.optionalString("household_id")
        )
    }

    /// Typed access to one stored operation's fields, with errors naming the operation and field.
    struct Fields {
        let object: JSONObject
        let index: Int

        init(_ value: JSONValue, index: Int) throws(JobPayloadError) {
            guard let object = value.objectValue else { throw JobPayloadError("stored operation \(index) is not an object") }
            self.object = object
            self.index = index
        }

        func string(_ key: String) throws(JobPayloadError) -> String {
            guard let value = object[key]?.stringValue else { throw missing(key, "a string") }
            return value
        }

        func optionalString(_ key: String) throws(JobPayloadError) -> String? {
            guard let value = object[key], !value.isNull else { return nil }
            guard let text = value.stringValue else { throw missing(key, "a string") }
            return text
        }

        func integer(_ key: String) throws(JobPayloadError) -> Int64 {
            guard let value = object[key]?.integerValue else { throw missing(key, "an integer") }
            return value
        }

        func document(_ key: String, required: Bool) throws(JobPayloadError) -> JSONObject? {
            guard required else { return nil }
            guard let value = object[key]?.objectValue else { throw missing(key, "an object") }
            return value
        }

        func missing(_ key: String, _ kind: String) -> JobPayloadError {
            JobPayloadError("stored operation \(index): '\(key)' must be \(kind)")
        }
    }
}

/// A stored job payload or result list that this release cannot read.
package struct JobPayloadError: Error, Sendable, Equatable, CustomStringConvertible {
    package var message: String
    package init(_ message: String) { self.message = message }
    package var description: String { message }
}
