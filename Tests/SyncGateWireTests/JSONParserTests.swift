import SyncGateCore
import Testing

@testable import SyncGateWire

@Suite(.timeLimit(.minutes(10))) struct JSONParserTests {
    let parser = JSONParser(maximumDepth: 8)

    @Test func parsesEveryKindOfValue() throws {
        let value = try parser.parse(#"{"a":[1,-2.5,1e3,true,false,null,"x\n\u00e9\ud83d\ude00"],"b":{}}"#)
        #expect(value == ["a": [1, -2.5, 1000.0, true, false, nil, "x\né😀"], "b": [:]])
    }

    @Test func keepsIntegersExact() throws {
        #expect(try parser.parse("9223372036854775807") == .int(.max))
        #expect(try parser.parse("-9223372036854775808") == .int(.min))
        #expect(try parser.parse("1.0") == .double(1))
        // Beyond 64 bits only when a double holds it exactly (PostgreSQL's jsonb writes 1e300 so).
        #expect(try parser.parse("1" + String(repeating: "0", count: 300)) == .double(1e300))
        #expect(try parser.parse("-10000000000000000000") == .double(-1e19))
        // A double holds 2^63·1000 exactly, but would write it 9.223372036854776e+21: refused below.
    }

    /// Never a changed number: what neither an Int64 nor a double holds exactly is refused.
    @Test(arguments: [
        "9223372036854775808", "-9223372036854775809", "-9223372036854775808000", "123456789012345678901234567890", "18446744073709551615",
        "3.141592653589793238462643", "0.12345678901234567890", "1e-400", "-1e-400", "9007199254740993.0", "1.00000000000000000001",
        // Exponents no double has: refused without overflowing (this one trapped the process).
        "0.1e-9223372036854775808", "1e9223372036854775807", "0.1e-99999999999999999999999",
    ])
    func refusesNumbersItCannotKeepExactly(_ text: String) {
        #expect(throws: JSONParseError.self) { try parser.parse(text) }
    }

    /// A number of four million digits is judged in linear time (stripping zeros one at a time
    /// from the front was quadratic: minutes of CPU for one push).
    @Test func aHugeNumberCostsLinearTime() throws {
        let zeros = String(repeating: "0", count: 2_000_000)
        let started = ContinuousClock.now
        #expect(throws: JSONParseError.self) { try JSONParser(maximumDepth: 8).parse("0.\(zeros)1") }
        #expect(try JSONParser(maximumDepth: 8).parse("1\(zeros.prefix(300)).0") == .double(1e300))
        // Milliseconds; the quadratic strip took minutes. The bound is a hang guard for a loaded machine.
        #expect(started.duration(to: .now) < .seconds(60))
    }

    @Test(arguments: [
        ("0.1", 0.1), ("1.50", 1.5), ("15e-1", 1.5), ("1E2", 100), ("-0.0", -0.0), ("5e-324", 5e-324), ("1.7976931348623157e308", .greatestFiniteMagnitude),
        ("0.30000000000000004", 0.30000000000000004), ("2.5e-5", 2.5e-5), ("100e0", 100), ("0e10", 0),
    ])
    func keepsDecimalsADoubleHoldsInTheirShortestForm(_ text: String, _ expected: Double) throws {
        #expect(try parser.parse(text) == .double(expected))
    }

    @Test(arguments: [
        "", " ", "{", "[1,]", "{\"a\":1,}", "{a:1}", "01", "-", "1.", ".5", "1e", "+1", "tru", "nul",
        "\"unterminated", "\"bad \\x escape\"", "\"\\u12\"", "\"\\ud800\"", "\"\\ud800\\u0041\"", "\"\\udc00\"",
        "[1] 2", "{\"a\" 1}", "1e999", "-1e999", "\"tab\there\"", "NaN", "Infinity", "[", "]",
    ])
    func rejectsMalformedInput(_ text: String) {
        #expect(throws: JSONParseError.self) { try parser.parse(text) }
        #expect(throws: JSONParseError.self) { try parser.compacted(Array(text.utf8)) }
        #expect(throws: JSONParseError.self) { try parser.compacted(text) }
    }

    @Test func aNumberOutOfRangeIsNamed() {
        // docs/protocol.md: a number the server would change is refused, naming the number.
        for text in ["1e400", "-2.5E999"] {
            let error = #expect(throws: JSONParseError.self) { try parser.parse(text) }
            #expect(error?.message.contains(text) == true, "\(String(describing: error))")
        }
    }

    @Test func rejectsInvalidUTF8() throws {
        let invalid: [[UInt8]] = [
            [0x22, 0xFF, 0x22],
            [0x22, 0xC3, 0x22],
            [0x22, 0xED, 0xA0, 0x80, 0x22],  // an encoded surrogate
            [0x22, 0xF8, 0x88, 0x80, 0x80, 0x80, 0x22],
            // After ASCII, and on either side of an escape (each run between escapes is checked
            // on its own; an ASCII run is taken without checking).
            [0x22, 0x61, 0x62, 0xFF, 0x22],
            [0x22, 0xFF, 0x5C, 0x6E, 0x61, 0x22],
            [0x22, 0x61, 0x5C, 0x6E, 0xC3, 0x22],
            [0x22, 0xC3, 0xA9, 0x5C, 0x6E, 0x61, 0xF0, 0x9F, 0x98, 0x22],
            [0x7B, 0x22, 0x6B, 0xFF, 0x22, 0x3A, 0x31, 0x7D],  // in a key
        ]
        for bytes in invalid {
            #expect(throws: JSONParseError.self) { try parser.parse(bytes) }
            #expect(throws: JSONParseError.self) { try parser.compacted(bytes) }
        }
        // The same shapes, valid: ASCII and non-ASCII runs around escapes.
        #expect(try parser.parse(Array(#""ab\ncé\t😀d\"""#.utf8)) == "ab\ncé\t😀d\"")
        #expect(try parser.parse(Array(#"{"clé":"x","k":"\u00e9é"}"#.utf8)) == ["clé": "x", "k": "éé"])
    }

    @Test func enforcesTheDepthLimitWithoutRecursingFurther() throws {
        let atLimit = String(repeating: "[", count: 8) + String(repeating: "]", count: 8)
        #expect(try parser.parse(atLimit).depth == 8)
        let overLimit = String(repeating: "[", count: 9) + String(repeating: "]", count: 9)
        #expect(throws: JSONParseError.self) { try parser.parse(overLimit) }
        // A hostile document far deeper than any stack could take is still just an error.
        let hostile = String(repeating: "[", count: 1_000_000)
        let error = #expect(throws: JSONParseError.self) { try parser.parse(hostile) }
        #expect(error?.message.hasPrefix("nesting deeper") == true)
        #expect(try parser.compacted(Array(atLimit.utf8)) == Array(atLimit.utf8))
        #expect(throws: JSONParseError.self) { try parser.compacted(Array(overLimit.utf8)) }
        #expect(throws: JSONParseError.self) { try parser.compacted(Array(#"{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{}}}}}}}}}"#.utf8)) }
        #expect(throws: JSONParseError.self) { try parser.compacted(Array(hostile.utf8)) }
    }

    @Test func serializationRoundTripsAndSortsKeys() throws {
        let value: JSONValue = ["b": [1, 2.5, "q\"\\\u{01}\u{2028}"], "a": nil, "c": ["z": true]]
        let text = value.serialized()
        #expect(text == #"{"a":null,"b":[1,2.5,"q\"\\\u0001\u2028"],"c":{"z":true}}"#)
        #expect(try parser.parse(text) == value)
    }

    /// Strings without anything to escape are written whole; each escape is still found in a
    /// string that also holds plain text, at its start, middle or end.
    @Test(arguments: [
        ("plain ascii", #""plain ascii""#),
        ("€ and ü and 😀", #""€ and ü and 😀""#),  // 0xE2 leads "€" but it needs no escape
        ("\u{2029}end", #""\u2029end""#),
        ("mid\u{2028}dle", #""mid\u2028dle""#),
        ("tab\t", #""tab\t""#),
        ("\"quoted\" \\ back", #""\"quoted\" \\ back""#),
        ("nul\u{00}and\u{1F}", #""nul\u0000and\u001f""#),
        ("", #""""#),
    ])
    func stringsAreEscapedExactlyWhereNeeded(_ string: String, _ expected: String) throws {
        #expect(JSONValue.string(string).serialized() == expected)
        #expect(try parser.parse(expected) == .string(string))
    }

    /// The parser takes decimals of at most 15 digits without an exponent as doubles without
    /// comparing their shortest forms; on every such decimal that comparison would agree.
    @Test func shortDecimalsNeedNoShortestFormCheck() throws {
        var random = SeededGenerator(seed: 15)
        for round in 0..<50_000 {
            let digits = Int.random(in: 2...15, using: &random)
            let integerDigits = Int.random(in: 1..<digits, using: &random)
            func digit(_ range: ClosedRange<Int>) -> String { String(Int.random(in: range, using: &random)) }
            // JSON allows no leading zero: "0.x" or a first digit of 1…9.
            var text = integerDigits == 1 ? digit(0...9) : digit(1...9) + (1..<integerDigits).map { _ in digit(0...9) }.joined()
            text += "." + (integerDigits..<digits).map { _ in digit(0...9) }.joined()
            if round % 2 == 1 { text = "-" + text }
            let double = try #require(Double(text))
            #expect(DecimalText(text) == DecimalText(double.description), "\(text) reads as \(double)")
            #expect(try parser.parse(text) == .double(double))
        }
        // Sixteen digits take the full check: this one no double holds.
        #expect(throws: JSONParseError.self) { try parser.parse("9007199254740993.0") }
    }

    @Test(arguments: [0.1, 1.0, -0.0, 1e300, 5e-324, 123456789.125, 1e16, -42.0])
    func doublesRoundTrip(_ number: Double) throws {
        #expect(try parser.parse(JSONValue.double(number).serialized()) == .double(number))
    }

    /// Compacting keeps every token as written and drops only the whitespace between them; the
    /// result parses to what the input parses to (PostgreSQL's jsonb text among the inputs).
    @Test(arguments: [
        #"{"a": [1, 2.50, "x y", true, false, null], "b": {"c": "\u00e9\n\"q\""}, "dd": -0.0}"#,
        " \n\t{ \"k\" :\r\n [ ] , \"e\" : { } } \n",
        #"{"kg": 57.0, "n": 1e300, "s": "a , b : c { d }"}"#,
        #"[1,"two",{"three":3}]"#,
        #""just a string""#, "12", "null",
        #"{"s": "€ and \u2028 and 😀"}"#,
    ])
    func compactingKeepsTheValue(_ text: String) throws {
        let compact = try parser.compacted(Array(text.utf8))
        #expect(try parser.compacted(text) == compact)
        #expect(try parser.parse(compact) == parser.parse(text))
        // Nothing but strings' own content is whitespace: removing every space, tab and newline
        // outside strings leaves the compact text.
        var outside: [UInt8] = [], inString = false, escaped = false
        for byte in text.utf8 {
            if inString {
                outside.append(byte)
                if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
            } else if byte == UInt8(ascii: "\"") {
                inString = true
                outside.append(byte)
            } else if ![UInt8(ascii: " "), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t")].contains(byte) {
                outside.append(byte)
            }
        }
        #expect(compact == outside)
    }

    /// A document's text equals its object whatever the key order and number spelling, and its
    /// object is what the text parses to.
    @Test func documentTextComparesByValue() throws {
        let stored = try DocumentText(checking: Array(#"{"kg": 57.0, "note": "a b", "at": 1.50}"#.utf8), parser: parser)
        let written = DocumentText(["at": 1.5, "kg": 57.0, "note": "a b"])
        #expect(stored == written)
        #expect(stored.hashValue == written.hashValue)
        #expect(stored.object == ["at": 1.5, "kg": 57.0, "note": "a b"])
        #expect(stored.bytes == Array(#"{"kg":57.0,"note":"a b","at":1.50}"#.utf8))
        #expect(throws: JSONParseError.self) { try DocumentText(checking: Array("[1]".utf8), parser: parser) }
        #expect(throws: JSONParseError.self) { try DocumentText(checking: Array(#"{"a":1e999}"#.utf8), parser: parser) }
    }

    @Test func duplicateKeysKeepTheLastValue() throws {
        #expect(try parser.parse(#"{"a":1,"a":2}"#) == ["a": 2])
        // Objects inside objects and arrays keep their own members; a parse that fails inside
        // one leaves nothing behind for the next.
        #expect(try parser.parse(#"{"a":{"x":1,"x":2,"y":{"z":[{"q":1},{},{"q":2,"r":{}}]}},"b":[{"c":1},{"c":2,"d":3}],"a":{"w":{"v":4}},"e":{}}"#)
            == ["a": ["w": ["v": 4]], "b": [["c": 1], ["c": 2, "d": 3]], "e": [:]])
        #expect(try parser.parse(#"[{"a":1},{"b":{"c":2}},{"d":3,"d":{"e":4}}]"#) == [["a": 1], ["b": ["c": 2]], ["d": ["e": 4]]])
        #expect(throws: JSONParseError.self) { try parser.parse(#"{"a":{"b":1,"c":}}"#) }
        #expect(try parser.parse(#"{"a":{"b":1}}"#) == ["a": ["b": 1]])
    }

    /// NFC and NFD "café" are two keys to PostgreSQL's jsonb, but one key of a `JSONObject`:
    /// such an object is refused, not stored with one of its members dropped.
    @Test func keysInTwoUnicodeFormsAreRefused() throws {
        #expect(throws: JSONParseError.self) { try parser.parse("{\"caf\u{E9}\":1,\"cafe\u{301}\":2}") }
        #expect(throws: JSONParseError.self) { try parser.parse(#"{"d":{"caf\u00e9":1,"cafe\u0301":2}}"#) }
        #expect(try parser.parse("{\"caf\u{E9}\":1,\"caf\u{E9}\":2}") == ["caf\u{E9}": 2])
        // The parser is usable after the refusal.
        #expect(try parser.parse(#"{"a":1}"#) == ["a": 1])
    }
}
