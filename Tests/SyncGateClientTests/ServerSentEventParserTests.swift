import Testing

@testable import SyncGateClient

@Suite("Server-sent events", .timeLimit(.minutes(10)))
struct ServerSentEventParserTests {
    @Test("SyncGate's stream: comments, retry, pokes")
    func syncGateStream() {
        var parser = ServerSentEventParser()
        let events = parser.consume(Array(": connected\nretry: 3000\n\n: keep-alive\n\nevent: poke\ndata: {\"household_ids\": [], \"user\": true}\n\n".utf8))
        #expect(events == [ServerSentEvent(event: "poke", data: #"{"household_ids": [], "user": true}"#, id: nil)])
        #expect(parser.retryMilliseconds == 3000)
    }

    @Test("a leading byte order mark is dropped, wherever the chunks split it; elsewhere it is data")
    func byteOrderMark() {
        let text: [UInt8] = [0xEF, 0xBB, 0xBF] + Array("event: poke\ndata: a\n\n".utf8)
        for split in 0...4 {
            var parser = ServerSentEventParser()
            let events = parser.consume(text[..<split]) + parser.consume(text[split...])
            #expect(events == [ServerSentEvent(event: "poke", data: "a", id: nil)], "split at \(split)")
        }
        var parser = ServerSentEventParser()
        #expect(parser.consume([0xEF, 0xBB] + Array("x\ndata: b\n\n".utf8)).map(\.data) == ["b"])
    }

    @Test("an event past 64 KiB, on one line or over many, ends the stream's parse")
    func overflow() {
        var endless = ServerSentEventParser()
        _ = endless.consume([UInt8](repeating: UInt8(ascii: "a"), count: 100_000))
        #expect(endless.overflowed)
        var many = ServerSentEventParser()
        let line = Array(("data: " + String(repeating: "b", count: 1000) + "\n").utf8)
        for _ in 0..<100 { _ = many.consume(line) }
        #expect(many.overflowed)
        var small = ServerSentEventParser()
        for _ in 0..<100 { _ = small.consume(Array(": keep-alive\n\n".utf8) + line + Array("\n".utf8)) }
        #expect(!small.overflowed)
    }

    @Test("events split across chunks anywhere, even inside a CRLF")
    func chunking() {
        let text = Array("event: poke\r\ndata: a\r\n\r\nevent: poke\r\ndata: b\r\n\r\n".utf8)
        for split in 0...text.count {
            var parser = ServerSentEventParser()
            let events = parser.consume(text[..<split]) + parser.consume(text[split...])
            #expect(events.map(\.data) == ["a", "b"], "split at \(split)")
        }
    }

    @Test("line endings CR, LF and CRLF; multi-line data; default type; id; fields without a value")
    func rules() {
        var parser = ServerSentEventParser()
        let events = parser.consume(Array("data: one\rdata:two\ndata\r\nid: 7\r\n\nevent\ndata: x\n\n".utf8))
        #expect(events == [
            ServerSentEvent(event: "message", data: "one\ntwo\n", id: "7"),
            ServerSentEvent(event: "message", data: "x", id: "7"),
        ])
    }

    @Test("an event without data is not dispatched, and its type does not leak into the next one")
    func noData() {
        var parser = ServerSentEventParser()
        #expect(parser.consume(Array("event: poke\n\ndata: y\n\n".utf8)) == [ServerSentEvent(event: "message", data: "y", id: nil)])
    }

    @Test("an unfinished event is held until its blank line; retry ignores non-digits")
    func unfinished() {
        var parser = ServerSentEventParser()
        #expect(parser.consume(Array("retry: 1x\nevent: poke\ndata: z\n".utf8)).isEmpty)
        #expect(parser.retryMilliseconds == nil)
        #expect(parser.consume(Array("\n".utf8)) == [ServerSentEvent(event: "poke", data: "z", id: nil)])
    }
}
