import CompressNIO
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import SyncGateCore
import SyncGateWire
@testable import SyncGateHTTP
import SyncGateTestSupport
import Testing

/// Gzip for clients that accept it: pull pages and job results above 1 KiB.
@Suite(.timeLimit(.minutes(10))) struct CompressionTests {
    @Test func acceptEncodingNegotiation() {
        typealias Middleware = ResponseCompression
        for accepted in ["gzip", "GZIP", "gzip, deflate, br", "br;q=1.0, gzip;q=0.5", "x-gzip", "*", "deflate, *;q=0.1", " gzip ; q=1 ", "\tgzip\t", ",,gzip", "X-GZIP;Q=0.5", "gzip;q=", "gzip;level=1"] {
            #expect(Middleware.acceptsGzip(accepted), "\(accepted)")
        }
        for refused in ["", "identity", "deflate, br", "gzip;q=0", "gzip;q=0.000", "*;q=0", "gzip;q=0, *", "*, gzip;q=0", "gzipx", "GZip;Q=0", "gzip;q=zero", "*;q=0.5, gzip;q=0", "gzip-x"] {
            #expect(!Middleware.acceptsGzip(refused), "\(refused)")
        }
    }

    @Test(arguments: Driver.selected)
    func largeAnswersAreGzippedForClientsThatAcceptIt(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver) { http in
            _ = try await http.results((0..<40).map { Op.create("contacts", "c\($0)", ["name": .string("Contact number \($0)"), "note": .string(String(repeating: "x", count: 40))]) })
            var headers = try await http.headers()
            let plain = try await http.client.executeRequest(uri: "/v1/sync/pull", method: .get, headers: headers, body: nil)
            #expect(plain.status == .ok && plain.headers[.contentEncoding] == nil)
            #expect(plain.headers[.vary] == "Accept-Encoding")
            headers[.acceptEncoding] = "gzip, deflate"
            let zipped = try await http.client.executeRequest(uri: "/v1/sync/pull", method: .get, headers: headers, body: nil)
            #expect(zipped.status == .ok && zipped.headers[.contentEncoding] == "gzip")
            var body = zipped.body
            #expect(body.readableBytes * 4 < plain.body.readableBytes, "\(body.readableBytes) of \(plain.body.readableBytes) bytes")
            let inflated = try body.decompress(with: .gzip())
            let page = try JSONParser().parse(Array(inflated.readableBytesView))
            let original = try JSONParser().parse(Array(plain.body.readableBytesView))
            #expect(page["changes"] == original["changes"])
            #expect(page["changes"]?.arrayValue?.count == 40)
            // Small answers go as they are.
            let small = try await http.client.executeRequest(uri: "/v1/sync/pull?entity_types=none", method: .get, headers: headers, body: nil)
            #expect(small.status == .ok && small.headers[.contentEncoding] == nil)
            // So do errors under the size, and the probes.
            let probe = try await http.client.executeRequest(uri: "/healthz", method: .get, headers: [.acceptEncoding: "gzip"], body: nil)
            #expect(probe.headers[.contentEncoding] == nil)
        }
    }
}
