import Testing

@testable import SyncGateCore

@Suite(.timeLimit(.minutes(2))) struct JSONParserTests {
    let parser = JSONParser(maximumDepth: 8)

    @Test func parsesEveryKindOfValue() throws {
        let value = try parser.parse(#"{"a":[1,-2.5,1e3,true,false,null,"x\n\u00e9\ud83d\ude00"],"b":{}}"#)
        #expect(value == ["a": [1, -2.5, 1000.0, true, false, nil, "x\né😀"], "b": [:]])
    }

    @Test func keepsIntegersExactAndOverflowsToDouble() throws {
        #expect(try parser.parse("9223372036854775807") == .int(.max))
        #expect(try parser.parse("-9223372036854775808") == .int(.min))
        #expect(try parser.parse("9223372036854775808") == .double(9223372036854775808))
        #expect(try parser.parse("1.0") == .double(1))
    }

    @Test(arguments: [
        "", " ", "{", "[1,]", "{\"a\":1,}", "{a:1}", "01", "-", "1.", ".5", "1e", "+1", "tru", "nul",
        "\"unterminated", "\"bad \\x escape\"", "\"\\u12\"", "\"\\ud800\"", "\"\\ud800\\u0041\"", "\"\\udc00\"",
        "[1] 2", "{\"a\" 1}", "1e999", "-1e999", "\"tab\there\"", "NaN", "Infinity", "[", "]",
    ])
    func rejectsMalformedInput(_ text: String) {
        #expect(throws: JSONParseError.self) { try parser.parse(text) }
    }

    @Test func rejectsInvalidUTF8() {
        let invalid: [[UInt8]] = [
            [0x22, 0xFF, 0x22],
            [0x22, 0xC3, 0x22],
            [0x22, 0xED, 0xA0, 0x80, 0x22],  // an encoded surrogate
            [0x22, 0xF8, 0x88, 0x80, 0x80, 0x80, 0x22],
        ]
        for bytes in invalid {
            #expect(throws: JSONParseError.self) { try parser.parse(bytes) }
        }
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
    }

    @Test func serializationRoundTripsAndSortsKeys() throws {
        let value: JSONValue = ["b": [1, 2.5, "q\"\\\u{01}\u{2028}"], "a": nil, "c": ["z": true]]
        let text = value.serialized()
        #expect(text == #"{"a":null,"b":[1,2.5,"q\"\\\u0001\u2028"],"c":{"z":true}}"#)
        #expect(try parser.parse(text) == value)
    }

    @Test(arguments: [0.1, 1.0, -0.0, 1e300, 5e-324, 123456789.125, 1e16, -42.0])
    func doublesRoundTrip(_ number: Double) throws {
        #expect(try parser.parse(JSONValue.double(number).serialized()) == .double(number))
    }

    @Test func duplicateKeysKeepTheLastValue() throws {
        #expect(try parser.parse(#"{"a":1,"a":2}"#) == ["a": 2])
    }
}
