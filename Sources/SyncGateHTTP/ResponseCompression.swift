import CompressNIO
import HTTPTypes
import Hummingbird
import NIOCore

/// Gzip for JSON answers a client accepts it for (`Accept-Encoding: gzip`): pull pages, job
/// results, the dialects' pages and full syncs. Mobile clients pay per byte, and a page of JSON
/// changes repeats its keys on every change. Answers under `minimumBytes` go as they are (the
/// gzip header and the CPU outweigh the saving); event streams and unknown lengths are never
/// touched. compress-nio (zlib) does the compressing; only the negotiation is here.
struct ResponseCompression: Sendable {
    let minimumBytes: Int

    /// `response` with its body gzipped when `request` accepts it and it is JSON of
    /// `minimumBytes` or more; marks such a response as varying by `Accept-Encoding` either way.
    func apply(to response: Response, for request: Request) async throws -> Response {
        var response = response
        guard let length = compressedLength(of: &response, for: request) else { return response }
        let collector = BodyCollector(capacity: length)
        try await response.body.write(collector)
        try compress(collector.buffer, into: &response)
        return response
    }

    /// The length of `response`'s body if it is to be compressed for `request`, `nil` if not;
    /// marks a compressible kind of response as varying by `Accept-Encoding`.
    private func compressedLength(of response: inout Response, for request: Request) -> Int? {
        guard let length = response.body.contentLength, length >= minimumBytes,
              response.headers[.contentEncoding] == nil,
              response.headers[.contentType]?.hasPrefix("application/json") == true
        else { return nil }
        response.headers[.vary] = "Accept-Encoding"
        guard Self.acceptsGzip(request.headers[values: .acceptEncoding].joined(separator: ",")) else { return nil }
        return length
    }

    private func compress(_ body: ByteBuffer, into response: inout Response) throws {
        var body = body
        let compressed = try body.compress(with: .gzip(configuration: .init(compressionLevel: Self.level)))
        response.headers[.contentEncoding] = "gzip"
        response.body = ResponseBody(byteBuffer: compressed)
    }

    /// zlib's level 5: within a few percent of level 9's size on JSON pages at about half its CPU.
    static var level: Int32 { 5 }

    /// Whether an `Accept-Encoding` value admits gzip: `gzip` (or `x-gzip`, or `*` when gzip is not
    /// named) with a quality above 0 (RFC 9110, 12.5.3). Read as bytes: the header is ASCII, and
    /// every pull page above `minimumBytes` asks, too often for Foundation's trimming and
    /// lowercasing of each piece.
    static func acceptsGzip(_ header: String) -> Bool {
        var gzip: Double?
        var any: Double?
        for item in header.utf8.split(separator: UInt8(ascii: ",")) {
            let parts = item.split(separator: UInt8(ascii: ";"))
            guard let coding = parts.first.map(trimmed), !coding.isEmpty else { continue }
            var quality = 1.0
            for parameter in parts.dropFirst() {
                let pair = parameter.split(separator: UInt8(ascii: "="), maxSplits: 1)
                if pair.count == 2, equalsIgnoringCase(trimmed(pair[0]), "q") {
                    quality = Double(String(decoding: trimmed(pair[1]), as: UTF8.self)) ?? 0
                }
            }
            if equalsIgnoringCase(coding, "gzip") || equalsIgnoringCase(coding, "x-gzip") {
                gzip = max(gzip ?? 0, quality)
            } else if coding.elementsEqual("*".utf8) {
                any = quality
            }
        }
        return (gzip ?? any ?? 0) > 0
    }

    /// Without leading and trailing spaces and tabs (RFC 9110's optional whitespace).
    private static func trimmed(_ bytes: Substring.UTF8View) -> Substring.UTF8View {
        let isWhitespace = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        guard let first = bytes.firstIndex(where: { !isWhitespace($0) }), let last = bytes.lastIndex(where: { !isWhitespace($0) }) else {
            return bytes[bytes.endIndex...]
        }
        return bytes[first...last]
    }

    /// ASCII case-insensitive equality with a lowercase `name`.
    private static func equalsIgnoringCase(_ bytes: Substring.UTF8View, _ name: StaticString) -> Bool {
        name.withUTF8Buffer { lowercase in
            bytes.elementsEqual(lowercase) { byte, expected in
                (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 32 == expected : byte == expected
            }
        }
    }
}

/// Collects a response body written with a known length.
private final class BodyCollector: ResponseBodyWriter, @unchecked Sendable {
    var buffer: ByteBuffer

    init(capacity: Int) {
        buffer = ByteBuffer()
        buffer.reserveCapacity(capacity)
    }

    func write(_ buffer: ByteBuffer) async throws {
        self.buffer.writeImmutableBuffer(buffer)
    }

    func finish(_ trailingHeaders: HTTPFields?) async throws {}
}
