package import SyncGateWire
/// Limits the front enforces on a push body; all configurable.
package struct PushLimits: Sendable, Hashable {
    package var maximumOperations: Int
    package var maximumDataBytes: Int
    package var maximumDataDepth: Int

    package init(maximumOperations: Int = 1000, maximumDataBytes: Int = 256 * 1024, maximumDataDepth: Int = 32) {
        self.maximumOperations = maximumOperations
        self.maximumDataBytes = maximumDataBytes
        self.maximumDataDepth = maximumDataDepth
    }
}

/// A validated `POST /v1/sync/push` body.
///
/// Validation here covers only the request's shape (JSON, field types, required fields, limits).
/// Anything that depends on configuration or stored state becomes a per-operation result later.
package struct PushRequest: Sendable, Hashable {
    package var operations: [SyncOperation]

    package init(operations: [SyncOperation]) {
        self.operations = operations
    }

    /// Parses and validates a push body.
    ///
    /// - Parameter receivedAt: the timestamp given to operations that carry no `client_timestamp`.
    package init(body: some Collection<UInt8>, limits: PushLimits = .init(), receivedAt: Timestamp) throws(ProtocolError) {
        try self.init(document: try Self.parse(body, limits: limits), limits: limits, receivedAt: receivedAt)
    }

    /// A push body's JSON, or the `VALIDATION_ERROR` a client gets for it. The envelope (body
    /// object, list, item object) adds three levels above `data`; a push in another dialect has
    /// the same envelope.
    package static func parse(_ body: some Collection<UInt8>, limits: PushLimits) throws(ProtocolError) -> JSONValue {
        do {
            return try JSONParser(maximumDepth: limits.maximumDataDepth + 3).parse(body)
        } catch {
            if error.message.hasPrefix("nesting deeper") {
                throw ProtocolError(.validationError, "data nests deeper than \(limits.maximumDataDepth) levels")
            }
            if error.message.hasPrefix("number") { throw ProtocolError(.validationError, "\(error)") }
            throw ProtocolError(.validationError, "malformed JSON: \(error)")
        }
    }

    package init(document: JSONValue, limits: PushLimits = .init(), receivedAt: Timestamp) throws(ProtocolError) {
        guard let root = document.objectValue else {
            throw ProtocolError(.validationError, "the body must be a JSON object")
        }
        guard let operationsValue = root["operations"] else {
            throw ProtocolError(.validationError, "missing field 'operations'")
        }
        guard let operations = operationsValue.arrayValue else {
            throw ProtocolError(.validationError, "field 'operations' must be an array")
        }
        guard !operations.isEmpty else {
            throw ProtocolError(.validationError, "field 'operations' must not be empty")
        }
        guard operations.count <= limits.maximumOperations else {
            throw ProtocolError(
                .validationError,
                "too many operations: \(operations.count) (at most \(limits.maximumOperations) per push)"
            )
        }
        var parsed: [SyncOperation] = []
        parsed.reserveCapacity(operations.count)
        for (index, value) in operations.enumerated() {
            parsed.append(try Self.parseOperation(value, index: index, limits: limits, receivedAt: receivedAt))
        }
        self.operations = parsed
    }

    static func parseOperation(
        _ value: JSONValue,
        index: Int,
        limits: PushLimits,
        receivedAt: Timestamp
    ) throws(ProtocolError) -> SyncOperation {
        let path = "operations[\(index)]"
        guard let object = value.objectValue else {
            throw ProtocolError(.validationError, "\(path) must be an object")
        }
        func requiredString(_ field: String, maximumLength: Int) throws(ProtocolError) -> String {
            guard let fieldValue = object[field], !fieldValue.isNull else {
                throw ProtocolError(.validationError, "\(path).\(field) is required")
            }
            guard let string = fieldValue.stringValue else {
                throw ProtocolError(.validationError, "\(path).\(field) must be a string")
            }
            guard IdentifierLimits.hasLength(string, in: 1...maximumLength) else {
                throw ProtocolError(.validationError, "\(path).\(field) must be 1 to \(maximumLength) characters")
            }
            guard !string.unicodeScalars.contains(where: IdentifierLimits.isControl) else {
                throw ProtocolError(.validationError, "\(path).\(field) must not contain control characters")
            }
            return string
        }

        let key = try requiredString("idempotency_key", maximumLength: IdentifierLimits.idempotencyKey)
        let entityType = try requiredString("entity_type", maximumLength: IdentifierLimits.entityType)
        let entityID = try requiredString("entity_id", maximumLength: IdentifierLimits.entityID)
        let intent = try SyncOperation.Intent.named(try requiredString("intent", maximumLength: 16), field: "\(path).intent")
        let baseVersion = try object.version("base_version", path: path)

        var data: JSONObject?
        if intent != .delete {
            guard let dataValue = object["data"], !dataValue.isNull else {
                throw ProtocolError(.validationError, "\(path).data is required for \(intent.rawValue)")
            }
            guard let dataObject = dataValue.objectValue else {
                throw ProtocolError(.validationError, "\(path).data must be an object")
            }
            if dataValue.depth > limits.maximumDataDepth {
                throw ProtocolError(.validationError, "\(path).data nests deeper than \(limits.maximumDataDepth) levels")
            }
            let size = limits.maximumDataBytes == .max ? 0 : dataValue.serialized().utf8.count
            if size > limits.maximumDataBytes {
                throw ProtocolError(
                    .validationError,
                    "\(path).data is \(size) bytes (at most \(limits.maximumDataBytes))"
                )
            }
            data = dataObject
        }

        var clientTimestamp = receivedAt
        if let value = object["client_timestamp"], !value.isNull {
            guard let text = value.stringValue, let timestamp = Timestamp(rfc3339: text) else {
                throw ProtocolError(.validationError, "\(path).client_timestamp must be an RFC 3339 timestamp")
            }
            clientTimestamp = timestamp
        }

        var householdID: String?
        if let value = object["household_id"], !value.isNull {
            householdID = try requiredString("household_id", maximumLength: IdentifierLimits.householdID)
        }

        return SyncOperation(
            idempotencyKey: key,
            entityType: entityType,
            entityID: entityID,
            intent: intent,
            baseVersion: baseVersion,
            data: data,
            clientTimestamp: clientTimestamp,
            householdID: householdID
        )
    }
}

/// Length limits of identifiers on the wire.
package enum IdentifierLimits {
    package static let userID = 128
    package static let deviceID = 128
    package static let idempotencyKey = 128
    package static let entityType = 128
    package static let entityID = 512
    package static let householdID = 128

    /// `X-Device-Id`: 1–128 characters of `A-Za-z0-9._:-` (``DeviceID/isWellFormed(_:)``).
    package static func isValidDeviceID(_ value: String) -> Bool {
        DeviceID.isWellFormed(value)
    }

    /// A token's `sub`: 1–128 characters, none a control character (the service API's rule for
    /// `user_id`; PostgreSQL refuses a NUL in text, so such a user could only get 500s).
    package static func isValidUserID(_ value: String) -> Bool {
        isValid(value, length: 1...userID)
    }

    /// Whether `value` has a number of characters in `range`. A character is a Unicode code
    /// point (as PostgreSQL's `char_length` counts), not a grapheme: one letter with thousands of
    /// combining marks is one grapheme, and would pass any limit. A code point is 1–4 UTF-8
    /// bytes, so a value of no more bytes than the range's end is measured by its byte count alone.
    package static func hasLength(_ value: String, in range: ClosedRange<Int>) -> Bool {
        let bytes = value.utf8.count
        if bytes <= range.upperBound, range.lowerBound <= 1 { return bytes >= range.lowerBound }
        return bytes <= 4 * range.upperBound && range.contains(value.unicodeScalars.count)
    }

    /// Whether `value` is an identifier: `range` characters (code points), none a control character.
    package static func isValid(_ value: String, length range: ClosedRange<Int>) -> Bool {
        hasLength(value, in: range) && !value.unicodeScalars.contains(where: isControl)
    }

    /// Whether a scalar is a control character (general category Cc): exactly U+0000–U+001F and
    /// U+007F–U+009F, a set Unicode's stability policy fixes; compared directly rather than
    /// looked up in the property tables for every scalar of every identifier.
    package static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }
}

extension SyncOperation.Intent {
    /// The intent `name` names; a validation error about `field` otherwise.
    package static func named(_ name: String, field: String) throws(ProtocolError) -> Self {
        guard let intent = Self(rawValue: name) else {
            throw ProtocolError(.validationError, "\(field) must be one of create, update, delete")
        }
        return intent
    }
}

extension JSONObject {
    /// The version in `field` of the object at `path`: a non-negative integer, 0 when absent or null.
    package func version(_ field: String, path: String) throws(ProtocolError) -> Int64 {
        guard let value = self[field], !value.isNull else { return 0 }
        guard let version = value.integerValue, version >= 0 else {
            throw ProtocolError(.validationError, "\(path).\(field) must be a non-negative integer")
        }
        return version
    }
}
