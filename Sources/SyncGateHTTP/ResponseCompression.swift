import CompressNIO
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Gzip for JSON answers a client accepts it for (`Accept-Encoding: gzip`): pull pages, job
/// results, the dialects' pages and full syncs. Mobile clients pay per byte, and a page of JSON
/// changes repeats its keys on every change. Answers under `minimumBytes` go as they are (the
/// gzip header and the CPU outweigh the saving); event streams and unknown lengths are never
/// touched. compress-nio (zlib) does the compressing; only the negotiation is here.
struct ResponseCompressionMiddleware<Context: RequestContext>: RouterMiddleware {
    let minimumBytes: Int

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response = try await next(request, context)
        guard let length = response.body.contentLength, length >= minimumBytes,
              response.headers[.contentEncoding] == nil,
              response.headers[.contentType]?.hasPrefix("application/json") == true
        else { return response }
        response.headers[.vary] = "Accept-Encoding"
        guard Self.acceptsGzip(request.headers[values: .acceptEncoding].joined(separator: ",")) else { return response }
        let collector = BodyCollector(capacity: length)
        try await response.body.write(collector)
        var body = collector.buffer
        let compressed = try body.compress(with: .gzip(configuration: .init(compressionLevel: Self.level)))
        response.headers[.contentEncoding] = "gzip"
        response.body = ResponseBody(byteBuffer: compressed)
        return response
    }

    /// zlib's level 5: within a few percent of level 9's size on JSON pages at about half its CPU.
    static var level: Int32 { 5 }

    /// Whether an `Accept-Encoding` value admits gzip: `gzip` (or `x-gzip`, or `*` when gzip is not
    /// named) with a quality above 0 (RFC 9110, 12.5.3).
    static func acceptsGzip(_ header: String) -> Bool {
        var gzip: Double?
        var any: Double?
        for item in header.split(separator: ",") {
            let parts = item.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            guard let coding = parts.first?.lowercased(), !coding.isEmpty else { continue }
            var quality = 1.0
            for parameter in parts.dropFirst() {
                let pair = parameter.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                if pair.count == 2, pair[0].lowercased() == "q" { quality = Double(pair[1]) ?? 0 }
            }
            switch coding {
            case "gzip", "x-gzip": gzip = max(gzip ?? 0, quality)
            case "*": any = quality
            default: break
            }
        }
        return (gzip ?? any ?? 0) > 0
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
