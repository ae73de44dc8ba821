/// A strict JSON parser (RFC 8259) with an explicit nesting limit.
///
/// It validates UTF-8, rejects control characters in strings, lone surrogates, trailing
/// content and numbers it cannot keep exactly (see `parseNumber`), and never recurses deeper than
/// ``maximumDepth`` — hostile input gets a ``JSONParseError``, not a crash.
public struct JSONParser: Sendable {
    public var maximumDepth: Int
    /// Whether an object with a key in two Unicode forms is refused (see `parseObject`); off
    /// only where text checked by ``compacted(_:)-(Bytes)``, which does not look at keys, is read.
    var refusesKeysInTwoForms = true

    public init(maximumDepth: Int = 64) {
        self.maximumDepth = maximumDepth
    }

    public func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        try parse(Array(text.utf8))
    }

    public func parse<Bytes: Collection<UInt8>>(_ bytes: Bytes) throws(JSONParseError) -> JSONValue {
        let buffer = Array(bytes)
        return try buffer.withUnsafeBufferPointer { (pointer) throws(JSONParseError) -> JSONValue in
            var reader = Reader(bytes: pointer, maximumDepth: maximumDepth)
            reader.refusesKeysInTwoForms = refusesKeysInTwoForms
            reader.skipWhitespace()
            let value = try reader.parseValue(depth: 0)
            reader.skipWhitespace()
            guard reader.isAtEnd else { throw reader.error("unexpected content after the JSON value") }
            return value
        }
    }
}

extension JSONParser {
    /// Checks `bytes` as ``parse(_:)-(Bytes)`` does (all but keys in two Unicode forms, which it
    /// does not decode) and returns them without the
    /// whitespace between tokens, without building the value: strings and numbers are copied as
    /// written (escapes included), so parsing the result gives what parsing `bytes` gives. For a
    /// stored document written into a page as it is: building its tree only to write it again
    /// was the largest cost of a pull page.
    public func compacted<Bytes: Collection<UInt8>>(_ bytes: Bytes) throws(JSONParseError) -> [UInt8] {
        try Array(bytes).withUnsafeBufferPointer { (pointer) throws(JSONParseError) -> [UInt8] in try compacted(pointer) }
    }

    /// ``compacted(_:)-(Bytes)`` of a string's UTF-8, read in place.
    public func compacted(_ text: String) throws(JSONParseError) -> [UInt8] {
        var text = text
        // `withUTF8` rethrows untyped errors: carry the typed one out in a Result.
        let result = text.withUTF8 { pointer in Result { () throws(JSONParseError) -> [UInt8] in try compacted(pointer) } }
        return try result.get()
    }

    func compacted(_ pointer: UnsafeBufferPointer<UInt8>) throws(JSONParseError) -> [UInt8] {
        var reader = Reader(bytes: pointer, maximumDepth: maximumDepth)
        var output: [UInt8] = []
        output.reserveCapacity(pointer.count)
        reader.skipWhitespace()
        try reader.copyValue(depth: 0, into: &output)
        reader.skipWhitespace()
        guard reader.isAtEnd else { throw reader.error("unexpected content after the JSON value") }
        return output
    }
}

public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public var offset: Int

    public var description: String { "\(message) at byte \(offset)" }
}

private struct Reader {
    let bytes: UnsafeBufferPointer<UInt8>
    let maximumDepth: Int
    var index = 0
    /// The members of the objects being parsed, innermost last: an object's dictionary is made
    /// once, at its size, when its `}` is read, instead of growing from empty and rehashing its
    /// members at each doubling (`bench/json REVISION` measures the parser).
    var members: [(key: String, value: JSONValue)] = []
    var refusesKeysInTwoForms = true

    init(bytes: UnsafeBufferPointer<UInt8>, maximumDepth: Int) {
        self.bytes = bytes
        self.maximumDepth = maximumDepth
    }

    var isAtEnd: Bool { index >= bytes.count }

    func error(_ message: String) -> JSONParseError {
        JSONParseError(message: message, offset: index)
    }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: " "), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"): index += 1
            default: return
            }
        }
    }

    mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
        guard index < bytes.count else { throw error("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw error("unexpected character")
        }
    }

    mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw error("invalid literal") }
        let expected = UnsafeBufferPointer(start: literal.utf8Start, count: count)
        for offset in 0..<count where bytes[index + offset] != expected[offset] {
            throw error("invalid literal")
        }
        index += count
    }

    mutating func parseObject(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= maximumDepth else { throw error("nesting deeper than \(maximumDepth)") }
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object([:])
        }
        let first = members.count
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a string key") }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            members.append((key, try parseValue(depth: depth)))
            guard try closes(UInt8(ascii: "}")) else { continue }
            var object = [String: JSONValue](minimumCapacity: members.count - first)
            for member in members[first...] where object.updateValue(member.value, forKey: member.key) != nil {
                // A repeated key keeps its last value (as PostgreSQL's jsonb does); two keys that
                // are the same text in two Unicode forms would be two keys there, but are one
                // dictionary key here: refused rather than one silently dropped.
                if refusesKeysInTwoForms, let kept = object.index(forKey: member.key), !object[kept].key.utf8.elementsEqual(member.key.utf8) {
                    members.removeSubrange(first...)
                    throw error("an object holds the key '\(member.key)' in two Unicode forms")
                }
            }
            members.removeSubrange(first...)
            return .object(object)
        }
    }

    /// After a container's member: consumes a `,` (`false`: another member follows) or `close`
    /// (`true`: the container ends).
    mutating func closes(_ close: UInt8) throws(JSONParseError) -> Bool {
        skipWhitespace()
        guard index < bytes.count else { throw error("unexpected end of input") }
        let byte = bytes[index]
        guard byte == UInt8(ascii: ",") || byte == close else {
            throw error(close == UInt8(ascii: "}") ? "expected ',' or '}'" : "expected ',' or ']'")
        }
        index += 1
        return byte == close
    }

    mutating func parseArray(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= maximumDepth else { throw error("nesting deeper than \(maximumDepth)") }
        index += 1
        var items: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(items)
        }
        while true {
            skipWhitespace()
            items.append(try parseValue(depth: depth))
            guard try closes(UInt8(ascii: "]")) else { continue }
            return .array(items)
        }
    }

    /// ``parseValue(depth:)``'s checks, copying the tokens instead of building values.
    mutating func copyValue(depth: Int, into output: inout [UInt8]) throws(JSONParseError) {
        guard index < bytes.count else { throw error("unexpected end of input") }
        let start = index
        switch bytes[index] {
        case UInt8(ascii: "{"):
            try copyContainer(depth: depth + 1, close: UInt8(ascii: "}"), into: &output) { (reader, output) throws(JSONParseError) in
                guard reader.index < reader.bytes.count, reader.bytes[reader.index] == UInt8(ascii: "\"") else { throw reader.error("expected a string key") }
                try reader.copyValue(depth: depth + 1, into: &output)
                reader.skipWhitespace()
                guard reader.index < reader.bytes.count, reader.bytes[reader.index] == UInt8(ascii: ":") else { throw reader.error("expected ':'") }
                reader.index += 1
                output.append(UInt8(ascii: ":"))
                reader.skipWhitespace()
                try reader.copyValue(depth: depth + 1, into: &output)
            }
            return
        case UInt8(ascii: "["):
            try copyContainer(depth: depth + 1, close: UInt8(ascii: "]"), into: &output) { (reader, output) throws(JSONParseError) in
                try reader.copyValue(depth: depth + 1, into: &output)
            }
            return
        case UInt8(ascii: "\""): try skipString()
        case UInt8(ascii: "t"): try expectLiteral("true")
        case UInt8(ascii: "f"): try expectLiteral("false")
        case UInt8(ascii: "n"): try expectLiteral("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): _ = try parseNumber()
        default: throw error("unexpected character")
        }
        output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<index]))
    }

    /// An object or array: `member` copies one member (skipping no whitespace before it).
    mutating func copyContainer(
        depth: Int, close: UInt8, into output: inout [UInt8], member: (inout Reader, inout [UInt8]) throws(JSONParseError) -> Void
    ) throws(JSONParseError) {
        guard depth <= maximumDepth else { throw error("nesting deeper than \(maximumDepth)") }
        output.append(bytes[index])
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == close {
            index += 1
            output.append(close)
            return
        }
        while true {
            skipWhitespace()
            try member(&self, &output)
            let closed = try closes(close)
            output.append(closed ? close : UInt8(ascii: ","))
            if closed { return }
        }
    }

    /// ``parseString()``'s checks without making the string: ASCII needs no UTF-8 check, and
    /// anything else is checked by parsing the string after all.
    mutating func skipString() throws(JSONParseError) {
        let start = index
        index += 1  // opening quote
        while true {
            guard index < bytes.count else { throw error("unterminated string") }
            switch bytes[index] {
            case UInt8(ascii: "\""):
                index += 1
                return
            case UInt8(ascii: "\\"):
                index += 1
                _ = try parseEscape()
            case 0..<0x20:
                throw error("control character in string")
            case 0x80...:
                index = start
                _ = try parseString()
                return
            default:
                index += 1
            }
        }
    }

    mutating func parseString() throws(JSONParseError) -> String {
        index += 1  // opening quote
        var scalars = String.UnicodeScalarView()
        var runStart = index
        // Every byte of the run OR-ed together: below 0x80, the run is ASCII.
        var runBits: UInt8 = 0
        func flush(_ reader: Reader, upTo end: Int, into scalars: inout String.UnicodeScalarView) throws(JSONParseError) {
            guard end > runStart else { return }
            scalars.append(contentsOf: try Self.string(UnsafeBufferPointer(rebasing: reader.bytes[runStart..<end]), ascii: runBits < 0x80, at: runStart).unicodeScalars)
        }
        while true {
            guard index < bytes.count else { throw error("unterminated string") }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                if scalars.isEmpty {
                    // No escape: the string is its bytes (most strings; skips building scalars).
                    let string = try Self.string(UnsafeBufferPointer(rebasing: bytes[runStart..<index]), ascii: runBits < 0x80, at: runStart)
                    index += 1
                    return string
                }
                try flush(self, upTo: index, into: &scalars)
                index += 1
                return String(scalars)
            case UInt8(ascii: "\\"):
                try flush(self, upTo: index, into: &scalars)
                index += 1
                scalars.append(try parseEscape())
                runStart = index
                runBits = 0
            case 0..<0x20:
                throw error("control character in string")
            default:
                runBits |= byte
                index += 1
            }
        }
    }

    /// The string of a run of bytes between escapes, which must be UTF-8. ASCII (most keys, ids
    /// and values) needs no validation: `String(decoding:as:)` takes it as it is. The standard
    /// library's `String(validating:as:)` is generic and not specialized for UTF-8 buffers, a
    /// visible cost when a worker parses job payloads and stored documents, so it checks only
    /// the runs that need it.
    static func string(_ run: UnsafeBufferPointer<UInt8>, ascii: Bool, at offset: Int) throws(JSONParseError) -> String {
        if ascii { return String(decoding: run, as: UTF8.self) }
        guard let string = String(validating: run, as: UTF8.self) else {
            throw JSONParseError(message: "invalid UTF-8 in string", offset: offset)
        }
        return string
    }

    mutating func parseEscape() throws(JSONParseError) -> Unicode.Scalar {
        guard index < bytes.count else { throw error("unterminated escape") }
        let byte = bytes[index]
        index += 1
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
            let first = try parseHex4()
            if (0xD800...0xDBFF).contains(first) {
                guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                    throw error("lone surrogate in string")
                }
                index += 2
                let second = try parseHex4()
                guard (0xDC00...0xDFFF).contains(second) else { throw error("invalid surrogate pair in string") }
                let combined = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                return Unicode.Scalar(combined)!
            }
            guard let scalar = Unicode.Scalar(first) else { throw error("lone surrogate in string") }
            return scalar
        default:
            throw error("invalid escape")
        }
    }

    mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw error("invalid unicode escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw error("invalid unicode escape")
            }
            value = value * 16 + digit
            index += 1
        }
        return value
    }

    mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw error("invalid number") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        var digitCount = index - start - (bytes[start] == UInt8(ascii: "-") ? 1 : 0)
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let fractionStart = index
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("invalid number") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            digitCount += index - fractionStart
        }
        var hasExponent = false
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            hasExponent = true
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("invalid number") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        // A number is kept exactly or refused, never changed: an integer in 64 bits as an
        // integer, anything else as the double whose shortest form is the same decimal number
        // (so `1e300`, also as PostgreSQL's jsonb writes it back, 1 and 300 zeros, is kept).
        if isInteger, let integer = Int64(text) {
            return .int(integer)
        }
        guard let double = Double(text), double.isFinite else {
            throw JSONParseError(message: "number \(text.prefix(40)) is out of range of a 64-bit float", offset: start)
        }
        // At most 15 digits and no exponent: a double keeps every such decimal (15 is
        // `DBL_DIG`: two of them never share a double, so the shortest form of the double is the
        // decimal itself) and its magnitude is far from the subnormals. The check below would
        // agree (JSONParserTests proves it on random decimals); it costs two allocations.
        if !hasExponent, digitCount <= 15 {
            return .double(double)
        }
        guard let given = DecimalText(text), given == DecimalText(double.description) else {
            throw JSONParseError(
                message: "number \(text.prefix(40)) cannot be kept exactly (integers up to 64 bits; other numbers as 64-bit floats)", offset: start
            )
        }
        return .double(double)
    }

    func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }
}

/// A decimal number in a canonical form (sign, significant digits, exponent of the last one), to
/// compare `1.50`, `15e-1` and `1.5` as the same number. Zero is one value, whatever its sign.
struct DecimalText: Equatable {
    var negative = false
    var digits: ArraySlice<UInt8> = []
    var exponent = 0

    /// `text` is a JSON number or a finite Double's `description` (`1e-05`, `1.0`, `5e-324`);
    /// `nil` when its exponent is beyond any double's (more than six digits): hostile text must
    /// cost linear time and never overflow.
    init?(_ text: String) {
        var mantissa: [UInt8] = []
        var fractionDigits = 0
        var inFraction = false
        var exponentText = ""
        var inExponent = false
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "-") where !inExponent && mantissa.isEmpty: negative = true
            case UInt8(ascii: "."): inFraction = true
            case UInt8(ascii: "e"), UInt8(ascii: "E"): inExponent = true
            case _ where inExponent:
                exponentText.append(Character(Unicode.Scalar(byte)))
                if exponentText.count > 8 { return nil }
            default:
                mantissa.append(byte)
                if inFraction { fractionDigits += 1 }
            }
        }
        guard let written = exponentText.isEmpty ? 0 : Int(exponentText) else { return nil }
        let zero = UInt8(ascii: "0")
        guard let first = mantissa.firstIndex(where: { $0 != zero }), let last = mantissa.lastIndex(where: { $0 != zero }) else {
            // Zero, whatever its sign and exponent.
            negative = false
            return
        }
        digits = mantissa[first...last]
        exponent = written - fractionDigits + (mantissa.count - 1 - last)
    }
}
