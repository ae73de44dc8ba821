/// A JSON value, as documents travel between an app, its local store and the server.
///
/// Integers that fit in 64 bits stay exact (`.int`); every other number is a `.double`, which is
/// written with a fraction when it happens to be integral (`2.0`) so that it reads back as a
/// double: a document survives any number of round trips unchanged. Object keys are unordered;
/// ``serialized()`` writes them sorted, so equal values encode equally.
public enum JSONValue: Sendable, Hashable {
    /// `null`; in a patch, removes the field.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number without a fraction that fits 64 bits.
    case int(Int64)
    /// Any other number.
    case double(Double)
    /// A string.
    case string(String)
    /// An array.
    case array([JSONValue])
    /// An object; its keys are unordered.
    case object([String: JSONValue])
}

/// A JSON object: an entity's document, or the changed fields of an update.
public typealias JSONObject = [String: JSONValue]

extension JSONValue {
    /// Whether the two are the same JSON: strings compare by their UTF-8 bytes, as the databases
    /// and the stored text do (NFC and NFD "café" are two values: a write from one to the other
    /// is a change). Object keys match as `Dictionary` keys do.
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.int(let a), .int(let b)): return a == b
        case (.double(let a), .double(let b)): return a == b
        case (.string(let a), .string(let b)): return UTF8Bytes.equal(a, b)
        case (.array(let a), .array(let b)): return a == b
        case (.object(let a), .object(let b)): return a == b
        default: return false
        }
    }

}

extension JSONValue {
    /// The members when this is an object.
    public var objectValue: JSONObject? {
        if case .object(let object) = self { return object }
        return nil
    }

    /// The elements when this is an array.
    public var arrayValue: [JSONValue]? {
        if case .array(let array) = self { return array }
        return nil
    }

    /// The text when this is a string.
    public var stringValue: String? {
        if case .string(let string) = self { return string }
        return nil
    }

    /// The value when this is a boolean.
    public var boolValue: Bool? {
        if case .bool(let bool) = self { return bool }
        return nil
    }

    /// The value when this is an integer (``int(_:)``).
    public var intValue: Int64? {
        if case .int(let value) = self { return value }
        return nil
    }

    /// The value as a `Double` when this is a number of either kind.
    public var numberValue: Double? {
        switch self {
        case .int(let value): return Double(value)
        case .double(let value): return value
        default: return nil
        }
    }

    /// The value as an `Int64` when this is a number without a fractional part, of either kind.
    public var integerValue: Int64? {
        switch self {
        case .int(let value): return value
        case .double(let value):
            guard value.rounded(.towardZero) == value, let exact = Int64(exactly: value) else { return nil }
            return exact
        default: return nil
        }
    }

    /// Whether this is `null`.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// The member `key` when this is an object.
    public subscript(key: String) -> JSONValue? {
        objectValue?[key]
    }

    /// The JSON type name, as validation messages say it.
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "boolean"
        case .int, .double: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }

    /// Nesting depth: scalars are 0, an object or array is one more than its deepest child.
    public var depth: Int {
        switch self {
        case .array(let items): return 1 + (items.map(\.depth).max() ?? 0)
        case .object(let members): return 1 + (members.values.map(\.depth).max() ?? 0)
        default: return 0
        }
    }
}

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    /// `nil` is ``null``.
    public init(nilLiteral: ()) { self = .null }
    /// A boolean literal.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// An integer literal is ``int(_:)``.
    public init(integerLiteral value: Int64) { self = .int(value) }
    /// A literal with a fraction is ``double(_:)``.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// A string literal.
    public init(stringLiteral value: String) { self = .string(value) }
    /// An array literal.
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    /// A dictionary literal is an object (a repeated key keeps its last value).
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}
