extension JSONValue {
    /// Compact JSON text with object keys sorted, so equal values always serialize identically.
    public func serialized() -> String {
        String(decoding: serializedBytes(), as: UTF8.self)
    }

    /// The UTF-8 bytes of ``serialized()``.
    public func serializedBytes() -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(64)
        write(to: &output)
        return output
    }

    /// Appends the UTF-8 of ``serialized()``. Bytes, not a `String`: appending to a `String`
    /// re-checks its capacity and encoding on every piece, which a 1,000-change pull page paid
    /// tens of thousands of times.
    public func write(to output: inout [UInt8]) {
        switch self {
        case .null: Self.append("null", to: &output)
        case .bool(let value): Self.append(value ? "true" : "false", to: &output)
        case .int(let value): output.append(contentsOf: String(value).utf8)
        case .double(let value): output.append(contentsOf: Self.formatDouble(value).utf8)
        case .string(let value): Self.writeString(value, to: &output)
        case .array(let items):
            output.append(UInt8(ascii: "["))
            for (position, item) in items.enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                item.write(to: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            output.append(UInt8(ascii: "{"))
            // Sorting the pairs, not the keys, spares hashing each key again to find its value.
            for (position, member) in members.sorted(by: { $0.key < $1.key }).enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                Self.writeString(member.key, to: &output)
                output.append(UInt8(ascii: ":"))
                member.value.write(to: &output)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    private static func append(_ literal: StaticString, to output: inout [UInt8]) {
        output.append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }

    static func formatDouble(_ value: Double) -> String {
        guard value.isFinite else { return "null" }
        if value == value.rounded(.towardZero), abs(value) < 1e15 {
            // Integral doubles keep a fraction so they read back as doubles.
            return String(Int64(value)) + ".0"
        }
        return value.description
    }

    /// Appends `value` as a JSON string: quoted, escaped where JSON requires it (and U+2028,
    /// U+2029, which JavaScript does not take raw).
    public static func writeString(_ value: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { bytes in
            // Most strings need no escape: append them whole rather than a scalar at a time (the
            // per-scalar path was the largest cost of a 1,000-change pull page).
            if !bytes.contains(where: needsEscape) {
                output.append(contentsOf: bytes)
                return
            }
            for scalar in String(decoding: bytes, as: UTF8.self).unicodeScalars {
                switch scalar {
                case "\"": append("\\\"", to: &output)
                case "\\": append("\\\\", to: &output)
                case "\n": append("\\n", to: &output)
                case "\r": append("\\r", to: &output)
                case "\t": append("\\t", to: &output)
                case "\u{08}": append("\\b", to: &output)
                case "\u{0C}": append("\\f", to: &output)
                case _ where scalar.value < 0x20 || scalar.value == 0x2028 || scalar.value == 0x2029:
                    let hex = String(scalar.value, radix: 16)
                    output.append(contentsOf: ("\\u" + String(repeating: "0", count: 4 - hex.count) + hex).utf8)
                default:
                    output.append(contentsOf: UTF8.encode(scalar)!)
                }
            }
        }
        output.append(UInt8(ascii: "\""))
    }

    /// Whether a UTF-8 byte may start something ``writeString(_:to:)`` escapes: a control
    /// character, a quote, a backslash, or the lead byte of U+2028/U+2029 (0xE2; a false alarm
    /// for other scalars with that lead byte only takes the slower path).
    private static func needsEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte == 0xE2
    }
}

extension JSONValue: CustomStringConvertible {
    public var description: String { serialized() }
}
