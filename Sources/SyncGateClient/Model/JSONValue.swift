/// A JSON value, as documents travel between the app, the local store and the server.
///
/// Integers stay exact (`.int`); every other number is a `.double`. A double that happens to be
/// integral is written with a fraction (`2.0`) so it reads back as a double: a document survives
/// any number of round trips unchanged, which is what lets the client compare versions of it.
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

    /// The value when this is an integer.
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

    /// Whether this is `null`.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// The member `key` when this is an object.
    public subscript(key: String) -> JSONValue? {
        objectValue?[key]
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

extension JSONValue: CustomStringConvertible {
    /// The compact JSON text, keys sorted.
    public var description: String { serialized() }
}
