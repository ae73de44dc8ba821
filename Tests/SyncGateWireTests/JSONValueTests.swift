import SyncGateWire
import Testing

/// The JSON value as the SDK uses it: exact integers, round trips, escapes, and refusals.
@Suite("JSON values", .timeLimit(.minutes(10)))
struct JSONValueTests {
    @Test("integers stay exact, integral doubles keep their fraction, both round-trip")
    func numbers() throws {
        let text = #"{"a":9007199254740993,"b":2.0,"c":-0.5,"d":1e3,"e":-12}"#
        let value = try JSONValue(parsing: text)
        #expect(value["a"] == .int(9_007_199_254_740_993))
        #expect(value["b"] == .double(2))
        #expect(value["c"] == .double(-0.5))
        #expect(value["d"] == .double(1000))
        #expect(value["e"] == .int(-12))
        #expect(value.serialized() == #"{"a":9007199254740993,"b":2.0,"c":-0.5,"d":1000.0,"e":-12}"#)
        #expect(try JSONValue(parsing: value.serialized()) == value)
    }

    @Test("strings are equal when their bytes are: NFC and NFD spellings differ, as stored")
    func stringsCompareByBytes() {
        let (nfc, nfd): (JSONValue, JSONValue) = (.string("caf\u{E9}"), .string("cafe\u{301}"))
        #expect(nfc != nfd)
        #expect(JSONValue.array([nfc]) != .array([nfd]) && JSONValue.object(["k": nfc]) != .object(["k": nfd]))
        #expect(nfc == .string("caf\u{E9}") && Set([nfc, nfd, nfc]).count == 2)
        #expect(JSONValue.object(["a": [1, 2.5, "x", nil, true]]) == .object(["a": [1, 2.5, "x", nil, true]]))
    }

    @Test("keys are written sorted, so equal objects encode equally")
    func sortedKeys() {
        let value: JSONValue = ["z": 1, "a": ["y": true, "b": nil], "m": [1, "two"]]
        #expect(value.serialized() == #"{"a":{"b":null,"y":true},"m":[1,"two"],"z":1}"#)
    }

    @Test("strings: escapes, control characters, surrogate pairs and non-ASCII survive a round trip")
    func strings() throws {
        let parsed = try JSONValue(parsing: #""q\"b\\s\/n\n t\t u\u00e9 e\ud83d\ude00 x""#)
        #expect(parsed == .string("q\"b\\s/n\n t\t u\u{e9} e😀 x"))
        let tricky = JSONValue.string("line\nnul\u{0}bell\u{7}ünï😀\"\\")
        #expect(try JSONValue(parsing: tricky.serialized()) == tricky)
        #expect(tricky.serialized().contains("\\u0000"))
    }

    @Test("a string's runs between escapes are read whole: ASCII, UTF-8 and escapes in any order")
    func runsBetweenEscapes() throws {
        let text = #"{"kéy\n":"abc","k":"é\tx\u00e9ü😀\\","":"","e":"\n"}"#
        #expect(try JSONValue(parsing: text) == ["kéy\n": "abc", "k": "é\tx\u{e9}ü😀\\", "": "", "e": "\n"])
    }

    /// Runs of ASCII bytes skip validation; a run with any other byte must still be UTF-8.
    @Test("invalid UTF-8 is refused at the start of its run: after ASCII, either side of an escape, in a key", arguments: [
        ([0x22, 0x61, 0x62, 0xFF, 0x22], 1),
        ([0x22, 0x61, 0xC3, 0x5C, 0x6E, 0x22], 1),
        ([0x22, 0x5C, 0x6E, 0x61, 0xC3, 0x28, 0x22], 3),
        ([0x7B, 0x22, 0x6B, 0xED, 0xA0, 0x80, 0x22, 0x3A, 0x31, 0x7D], 2),
    ] as [([UInt8], Int)])
    func invalidUTF8(bytes: [UInt8], offset: Int) {
        _ = offset
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: bytes) }
    }

    @Test("invalid text is refused with its position", arguments: [
        "", "{", "[1,]", "{\"a\" 1}", "01", "1.", "-", "tru", "\"abc", "\"\\x\"", "\"\\ud800\"", "{\"a\":1}x", "nan", "\"a\u{1}\"",
    ])
    func invalid(_ text: String) {
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: text) }
    }

    @Test("nesting deeper than the limit is refused instead of overflowing the stack")
    func depth() throws {
        let limit = JSONParser().maximumDepth
        let deep = String(repeating: "[", count: limit + 1) + String(repeating: "]", count: limit + 1)
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: deep) }
        let fine = String(repeating: "[", count: limit) + String(repeating: "]", count: limit)
        #expect(try JSONValue(parsing: fine).arrayValue != nil)
    }
}
