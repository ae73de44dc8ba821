extension JSONValue {
    /// Compact JSON text with object keys sorted, so equal values always serialize identically.
    public func serialized() -> String {
        var output = ""
        write(to: &output)
        return output
    }

    /// The UTF-8 bytes of ``serialized()``.
    public func serializedBytes() -> [UInt8] {
        Array(serialized().utf8)
    }

    public func write(to output: inout String) {
        switch self {
        case .null: output += "null"
        case .bool(let value): output += value ? "true" : "false"
        case .int(let value): output += String(value)
        case .double(let value): output += Self.formatDouble(value)
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

    static func formatDouble(_ value: Double) -> String {
        guard value.isFinite else { return "null" }
        if value == value.rounded(.towardZero), abs(value) < 1e15 {
            // Integral doubles keep a fraction so they read back as doubles.
            return String(Int64(value)) + ".0"
        }
        return value.description
    }

    static func writeString(_ value: String, to output: inout String) {
        output += "\""
        // Most strings need no escape: append them whole rather than a scalar at a time (the
        // per-scalar path was the largest cost of a 1,000-change pull page).
        if !value.utf8.contains(where: needsEscape) {
            output += value
            output += "\""
            return
        }
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case "\u{08}": output += "\\b"
            case "\u{0C}": output += "\\f"
            case _ where scalar.value < 0x20 || scalar.value == 0x2028 || scalar.value == 0x2029:
                let hex = String(scalar.value, radix: 16)
                output += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default:
                output.unicodeScalars.append(scalar)
            }
        }
        output += "\""
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
