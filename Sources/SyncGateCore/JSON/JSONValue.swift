/// A JSON document as SyncGate stores and compares it.
///
/// Integers that fit in 64 bits stay exact (`.int`); every other number is a `.double`.
/// Object keys are unordered; ``serialized()`` writes them sorted so equal values encode equally.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
}

extension JSONValue {
    public var objectValue: [String: JSONValue]? {
        if case .object(let object) = self { return object }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let array) = self { return array }
        return nil
    }

    public var stringValue: String? {
        if case .string(let string) = self { return string }
        return nil
    }

    public var boolValue: Bool? {
        if case .bool(let bool) = self { return bool }
        return nil
    }

    /// The value as a `Double` when it is a number of either representation.
    public var numberValue: Double? {
        switch self {
        case .int(let value): return Double(value)
        case .double(let value): return value
        default: return nil
        }
    }

    /// The value as an `Int64` when it is a number without a fractional part.
    public var integerValue: Int64? {
        switch self {
        case .int(let value): return value
        case .double(let value):
            guard value.rounded(.towardZero) == value, let exact = Int64(exactly: value) else { return nil }
            return exact
        default: return nil
        }
    }

    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    public subscript(key: String) -> JSONValue? {
        objectValue?[key]
    }

    /// The JSON type name used in validation messages.
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
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

/// A JSON object, the shape of every entity document.
public typealias JSONObject = [String: JSONValue]
