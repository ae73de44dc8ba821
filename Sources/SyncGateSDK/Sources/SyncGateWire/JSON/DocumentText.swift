/// A JSON object kept as its compact, checked UTF-8 text: a stored document read for a pull
/// page is checked and written into the page as it is, and parsed only where a value is needed.
///
/// Two texts are equal when their objects are (key order and number spelling aside: `1.50` and
/// `1.5`, PostgreSQL's and SyncGate's key orders).
public struct DocumentText: Sendable, Hashable {
    /// Compact JSON text of an object, checked by ``JSONParser``.
    public let bytes: [UInt8]
    let maximumDepth: Int

    public init(_ object: JSONObject) {
        bytes = JSONValue.object(object).serializedBytes()
        maximumDepth = Int.max
    }

    /// Checks `text` as `parser` would parse it, and that it is an object.
    public init(checking text: String, parser: JSONParser) throws(JSONParseError) {
        try self.init(compact: parser.compacted(text), parser: parser)
    }

    /// Checks `text` as `parser` would parse it, and that it is an object.
    public init(checking text: [UInt8], parser: JSONParser) throws(JSONParseError) {
        try self.init(compact: parser.compacted(text), parser: parser)
    }

    private init(compact: [UInt8], parser: JSONParser) throws(JSONParseError) {
        guard compact.first == UInt8(ascii: "{") else { throw JSONParseError(message: "not a JSON object", offset: 0) }
        bytes = compact
        maximumDepth = parser.maximumDepth
    }

    /// The object. The text was checked by the same rules, so it parses (a key in two Unicode
    /// forms, which the check does not look at, keeps its last value here rather than trap).
    public var object: JSONObject {
        do {
            var parser = JSONParser(maximumDepth: maximumDepth)
            parser.refusesKeysInTwoForms = false
            guard let object = try parser.parse(bytes).objectValue else { preconditionFailure("a checked document is an object") }
            return object
        } catch {
            preconditionFailure("a checked document no longer parses: \(error)")
        }
    }

    public static func == (lhs: DocumentText, rhs: DocumentText) -> Bool {
        lhs.bytes == rhs.bytes || lhs.object == rhs.object
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(object)
    }
}
