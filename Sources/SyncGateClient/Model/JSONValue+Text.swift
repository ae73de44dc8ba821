import Foundation

extension JSONValue {
    /// Compact JSON text with object keys sorted, so equal values always encode equally.
    public func serialized() -> String {
        var output = ""
        write(to: &output)
        return output
    }

    /// Parses JSON text (UTF-8).
    /// - Throws: ``JSONValue/ParseError`` when the text is not one JSON value.
    public init(parsing text: String) throws {
        var parser = JSONTextParser(bytes: Array(text.utf8))
        self = try parser.parseDocument()
    }

    /// Parses JSON bytes (UTF-8).
    /// - Throws: ``JSONValue/ParseError`` when the bytes are not one JSON value.
    public init(parsing bytes: some Collection<UInt8>) throws {
        var parser = JSONTextParser(bytes: Array(bytes))
        self = try parser.parseDocument()
    }

    /// JSON text that is not one valid JSON value.
    public struct ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        /// Where parsing stopped, in bytes from the start.
        public var offset: Int
        /// What was expected there.
        public var reason: String
        /// Where and why parsing failed.
        public var description: String { "invalid JSON at byte \(offset): \(reason)" }
    }

    func write(to output: inout String) {
        switch self {
        case .null: output += "null"
        case .bool(let value): output += value ? "true" : "false"
        case .int(let value): output += String(value)
        case .double(let value): output += Self.format(value)
        case .string(let value): Self.writeString(value, to: &output)
        case .array(let items):
            output += "["
            for (position, item) in items.enumerated() {
                if position > 0 { output += "," }
                item.write(to: &output)
            }
            output += "]"
        case .object(let members):
            output += "{"
            for (position, key) in members.keys.sorted().enumerated() {
                if position > 0 { output += "," }
                Self.writeString(key, to: &output)
                output += ":"
                members[key]!.write(to: &output)
            }
            output += "}"
        }
    }

    static func format(_ value: Double) -> String {
        // JSON has no NaN or infinity.
        guard value.isFinite else { return "null" }
        if value == value.rounded(.towardZero), abs(value) < 1e15 {
            // Integral doubles keep a fraction so they read back as doubles (as the server writes them).
            return String(Int64(value)) + ".0"
        }
        return value.description
    }

    static func writeString(_ value: String, to output: inout String) {
        output += "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case _ where scalar.value < 0x20:
                output += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16)
            default: output.unicodeScalars.append(scalar)
            }
        }
        output += "\""
    }
}

/// A strict recursive-descent JSON parser that keeps integers exact.
struct JSONTextParser {
    /// Deeper documents are refused instead of overflowing the stack (the server allows 32).
    static let maximumDepth = 512

    let bytes: [UInt8]
    var position = 0

    init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    mutating func parseDocument() throws -> JSONValue {
        let value = try parseValue(depth: 0)
        skipWhitespace()
        guard position == bytes.count else { throw failure("end of input") }
        return value
    }

    private func failure(_ expected: String) -> JSONValue.ParseError {
        JSONValue.ParseError(offset: position, reason: "expected \(expected)")
    }

    private mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private mutating func parseValue(depth: Int) throws -> JSONValue {
        guard depth < Self.maximumDepth else { throw failure("at most \(Self.maximumDepth) levels of nesting") }
        skipWhitespace()
        guard position < bytes.count else { throw failure("a value") }
        switch bytes[position] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth)
        case UInt8(ascii: "["): return try parseArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectWord("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectWord("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectWord("null"); return .null
        default: return try parseNumber()
        }
    }

    private mutating func expectWord(_ word: String) throws {
        let utf8 = Array(word.utf8)
        guard bytes.count - position >= utf8.count, Array(bytes[position..<position + utf8.count]) == utf8 else {
            throw failure("'\(word)'")
        }
        position += utf8.count
    }

    private mutating func parseObject(depth: Int) throws -> JSONValue {
        position += 1
        var members: JSONObject = [:]
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
            position += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { throw failure("a member name") }
            let key = try parseString()
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else { throw failure("':'") }
            position += 1
            members[key] = try parseValue(depth: depth + 1)
            skipWhitespace()
            guard position < bytes.count else { throw failure("',' or '}'") }
            if bytes[position] == UInt8(ascii: ",") {
                position += 1
            } else if bytes[position] == UInt8(ascii: "}") {
                position += 1
                return .object(members)
            } else {
                throw failure("',' or '}'")
            }
        }
    }

    private mutating func parseArray(depth: Int) throws -> JSONValue {
        position += 1
        var items: [JSONValue] = []
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
            position += 1
            return .array(items)
        }
        while true {
            items.append(try parseValue(depth: depth + 1))
            skipWhitespace()
            guard position < bytes.count else { throw failure("',' or ']'") }
            if bytes[position] == UInt8(ascii: ",") {
                position += 1
            } else if bytes[position] == UInt8(ascii: "]") {
                position += 1
                return .array(items)
            } else {
                throw failure("',' or ']'")
            }
        }
    }

    private mutating func parseString() throws -> String {
        position += 1
        var scalars = String.UnicodeScalarView()
        var run = position
        // Every byte of the run OR-ed together: below 0x80, the run is ASCII.
        var runBits: UInt8 = 0
        while position < bytes.count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                let text = try string(from: run, to: position, ascii: runBits < 0x80)
                position += 1
                // No escape (most strings): the string is its bytes, without building scalars.
                if scalars.isEmpty { return text }
                scalars.append(contentsOf: text.unicodeScalars)
                return String(scalars)
            }
            if byte < 0x20 { throw failure("no control characters in a string") }
            if byte == UInt8(ascii: "\\") {
                scalars.append(contentsOf: try string(from: run, to: position, ascii: runBits < 0x80).unicodeScalars)
                position += 1
                scalars.append(try parseEscape())
                run = position
                runBits = 0
                continue
            }
            runBits |= byte
            position += 1
        }
        throw failure("'\"'")
    }

    /// The text of a run of bytes between escapes, which must be UTF-8. ASCII needs no
    /// validation; the standard library's `String(validating:as:)` is generic, and checking every
    /// run with it took two thirds of a 1,000-change pull page's parse.
    private func string(from start: Int, to end: Int, ascii: Bool) throws -> String {
        guard start < end else { return "" }
        return try bytes.withUnsafeBufferPointer { buffer in
            let run = UnsafeBufferPointer(rebasing: buffer[start..<end])
            if ascii { return String(decoding: run, as: UTF8.self) }
            guard let text = String(validating: run, as: UTF8.self) else {
                throw JSONValue.ParseError(offset: start, reason: "expected valid UTF-8")
            }
            return text
        }
    }

    private mutating func parseEscape() throws -> Unicode.Scalar {
        guard position < bytes.count else { throw failure("an escape") }
        let byte = bytes[position]
        position += 1
        switch byte {
        case UInt8(ascii: "\""): return "\""
        case UInt8(ascii: "\\"): return "\\"
        case UInt8(ascii: "/"): return "/"
        case UInt8(ascii: "b"): return "\u{08}"
        case UInt8(ascii: "f"): return "\u{0C}"
        case UInt8(ascii: "n"): return "\n"
        case UInt8(ascii: "r"): return "\r"
        case UInt8(ascii: "t"): return "\t"
        case UInt8(ascii: "u"):
            let high = try parseHex4()
            if (0xD800..<0xDC00).contains(high) {
                guard position + 1 < bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u") else {
                    throw failure("a low surrogate")
                }
                position += 2
                let low = try parseHex4()
                guard (0xDC00..<0xE000).contains(low) else { throw failure("a low surrogate") }
                return Unicode.Scalar(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))!
            }
            guard let scalar = Unicode.Scalar(high) else { throw failure("a valid code point") }
            return scalar
        default:
            position -= 1
            throw failure("a valid escape")
        }
    }

    private mutating func parseHex4() throws -> UInt32 {
        guard bytes.count - position >= 4 else { throw failure("4 hex digits") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = Self.hexValue(bytes[position]) else { throw failure("a hex digit") }
            value = value << 4 | digit
            position += 1
        }
        return value
    }

    private static func hexValue(_ byte: UInt8) -> UInt32? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return UInt32(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return UInt32(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return UInt32(byte - UInt8(ascii: "A") + 10)
        default: return nil
        }
    }

    private mutating func parseNumber() throws -> JSONValue {
        let start = position
        var isInteger = true
        if position < bytes.count, bytes[position] == UInt8(ascii: "-") { position += 1 }
        guard position < bytes.count, Self.isDigit(bytes[position]) else { throw failure("a value") }
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
        } else {
            while position < bytes.count, Self.isDigit(bytes[position]) { position += 1 }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            isInteger = false
            position += 1
            guard position < bytes.count, Self.isDigit(bytes[position]) else { throw failure("a digit after '.'") }
            while position < bytes.count, Self.isDigit(bytes[position]) { position += 1 }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            isInteger = false
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") { position += 1 }
            guard position < bytes.count, Self.isDigit(bytes[position]) else { throw failure("a digit in the exponent") }
            while position < bytes.count, Self.isDigit(bytes[position]) { position += 1 }
        }
        let text = String(decoding: bytes[start..<position], as: UTF8.self)
        if isInteger, let value = Int64(text) { return .int(value) }
        guard let value = Double(text), value.isFinite else { throw JSONValue.ParseError(offset: start, reason: "expected a finite number") }
        return .double(value)
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }
}
