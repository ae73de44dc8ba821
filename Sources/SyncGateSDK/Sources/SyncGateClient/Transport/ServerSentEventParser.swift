import SyncGateWire
/// One server-sent event.
struct ServerSentEvent: Sendable, Hashable {
    /// The `event:` field, `message` when absent.
    var event: String
    /// The `data:` lines, joined with newlines.
    var data: String
    /// The `id:` field, when the event had one.
    var id: String?
}

/// Parses a `text/event-stream` body as it arrives, following the HTML standard's
/// interpretation rules: lines end in CRLF, LF or CR; `:` starts a comment; an empty line
/// dispatches the event if it has data; `retry:` sets the reconnection delay.
///
/// The mirrored EventSource package parses with an actor call per byte and connects with
/// `URLSession.bytes(for:)`, which swift-corelibs-foundation does not have, so it does not build
/// on Linux; this parser is fed the chunks AsyncHTTPClient delivers.
struct ServerSentEventParser: Sendable {
    /// The largest event (its line being read and its data so far) kept: SyncGate's are a few
    /// bytes, and a body with no line end (a proxy's) must not grow without end.
    static let maximumEventBytes = 64 * 1024

    /// The reconnection delay the server asked for with `retry:`, in milliseconds.
    private(set) var retryMilliseconds: Int?
    /// Whether an event passed ``maximumEventBytes``: the stream is not SyncGate's, end it.
    private(set) var overflowed = false
    /// Comment lines read (SyncGate opens with one, then sends one every keep-alive interval).
    private(set) var comments = 0
    private var line: [UInt8] = []
    /// Bytes of the stream read so far, up to three: a leading byte order mark is dropped.
    private var started = 0
    private var afterCarriageReturn = false
    private var eventType = ""
    private var data = ""
    private var hasData = false
    private var lastEventID: String?

    init() {}

    /// Feeds bytes; returns the events they complete.
    mutating func consume(_ bytes: some Sequence<UInt8>) -> [ServerSentEvent] {
        var events: [ServerSentEvent] = []
        for byte in bytes {
            if started < 3 {
                // A UTF-8 byte order mark (EF BB BF) may open the stream; it is not part of a field.
                let mark: [UInt8] = [0xEF, 0xBB, 0xBF]
                if byte == mark[started], line.count == started {
                    started += 1
                    line.append(byte)
                    if started == 3 { line.removeAll(keepingCapacity: true) }
                    continue
                }
                started = 3
            }
            if afterCarriageReturn {
                afterCarriageReturn = false
                if byte == 0x0A { continue }
            }
            switch byte {
            case 0x0A:
                if let event = endLine() { events.append(event) }
            case 0x0D:
                afterCarriageReturn = true
                if let event = endLine() { events.append(event) }
            default:
                guard line.count + data.utf8.count < Self.maximumEventBytes else {
                    overflowed = true
                    return events
                }
                line.append(byte)
            }
        }
        return events
    }

    private mutating func endLine() -> ServerSentEvent? {
        defer { line.removeAll(keepingCapacity: true) }
        if line.isEmpty { return dispatch() }
        if line.first == UInt8(ascii: ":") {
            comments += 1
            return nil
        }
        let field: String
        let value: String
        if let colon = line.firstIndex(of: UInt8(ascii: ":")) {
            field = String(decoding: line[..<colon], as: UTF8.self)
            var start = line.index(after: colon)
            if start < line.endIndex, line[start] == UInt8(ascii: " ") { start = line.index(after: start) }
            value = String(decoding: line[start...], as: UTF8.self)
        } else {
            field = String(decoding: line, as: UTF8.self)
            value = ""
        }
        switch field {
        case "event":
            eventType = value
        case "data":
            guard data.utf8.count + value.utf8.count < Self.maximumEventBytes else {
                overflowed = true
                return nil
            }
            if hasData { data += "\n" }
            data += value
            hasData = true
        case "id":
            if !value.contains("\0") { lastEventID = value }
        case "retry":
            if !value.isEmpty, value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
                retryMilliseconds = Int(value)
            }
        default:
            break
        }
        return nil
    }

    private mutating func dispatch() -> ServerSentEvent? {
        defer {
            eventType = ""
            data = ""
            hasData = false
        }
        guard hasData else { return nil }
        return ServerSentEvent(event: eventType.isEmpty ? "message" : eventType, data: data, id: lastEventID)
    }
}
