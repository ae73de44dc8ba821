import Foundation
import HummingbirdTesting
import NIOCore
import NIOPosix
import Synchronization
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// A client that sends an oversized push without `Expect: 100-continue` reads the answer only
/// after it has written everything: it must get its `413`, and the server must not read forever.
/// Driven over a raw socket, the body written as fast as the server takes it.
@Suite(.timeLimit(.minutes(2))) struct OversizedBodyTests {
    static let limit = 100_000

    /// The bytes the server sent, and whether it closed the connection.
    final class Collector: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let received = Mutex<[UInt8]>([])

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            received.withLock { $0 += buffer.readableBytesView }
        }

        var text: String { String(decoding: received.withLock { $0 }, as: UTF8.self) }
    }

    /// Sends `head` and then `bodyBytes` of body (chunked when `chunked`), 64 KiB at a time, until
    /// all is sent or the server closes; returns how much of the body went out, what came back
    /// within 5 s, and whether the connection was closed.
    static func send(port: Int, token: String, bodyBytes: Int, chunked: Bool) async throws -> (sent: Int, answer: String, closed: Bool) {
        let collector = Collector()
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(collector) } }
            .connect(host: "127.0.0.1", port: port).get()
        let framing = chunked ? "Transfer-Encoding: chunked" : "Content-Length: \(bodyBytes)"
        try await channel.writeAndFlush(ByteBuffer(string:
            "POST /v1/sync/push HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nX-Device-Id: d1\r\nContent-Type: application/json\r\n\(framing)\r\n\r\n"
        )).get()
        let piece = [UInt8](repeating: UInt8(ascii: " "), count: 64 * 1024)
        var sent = 0
        while sent < bodyBytes, channel.isActive {
            let size = min(piece.count, bodyBytes - sent)
            var buffer = ByteBuffer()
            if chunked { buffer.writeString(String(size, radix: 16) + "\r\n") }
            buffer.writeBytes(piece[..<size])
            if chunked { buffer.writeString("\r\n") }
            guard (try? await channel.writeAndFlush(buffer).get()) != nil else { break }
            sent += size
        }
        if chunked, channel.isActive { _ = try? await channel.writeAndFlush(ByteBuffer(string: "0\r\n\r\n")).get() }
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline, !collector.text.contains("\r\n\r\n{") || !collector.text.hasSuffix("}") {
            try await Task.sleep(for: .milliseconds(20))
        }
        let closed = !channel.isActive
        try? await channel.close()
        return (sent, collector.text, closed)
    }

    @Test(arguments: [false, true])
    func anOversizedBodyGetsItsAnswerAndTheServerStopsReadingPastTheCap(_ chunked: Bool) async throws {
        var configuration = HTTPHarness.testConfiguration
        configuration.maximumBodyBytes = Self.limit
        try await HTTPHarness.with(.sqlite, setup: .live, configuration: configuration, workers: 0) { http in
            let port = try #require(http.client.port)
            let token = try await http.token()

            // Over the limit, within the lingering allowance: the whole body is read, the 413 arrives.
            let modest = try await Self.send(port: port, token: token, bodyBytes: 1_000_000, chunked: chunked)
            #expect(modest.sent == 1_000_000)
            #expect(modest.answer.hasPrefix("HTTP/1.1 413") && modest.answer.contains("PAYLOAD_TOO_LARGE"), "\(modest.answer)")

            // Far past it: the server closes instead of reading 64 MB, and the 413 still arrived.
            let huge = try await Self.send(port: port, token: token, bodyBytes: 64 << 20, chunked: chunked)
            #expect(huge.sent < 32 << 20, "the server read \(huge.sent) bytes of an oversized body")
            #expect(huge.closed)
            #expect(huge.answer.hasPrefix("HTTP/1.1 413"), "\(huge.answer.prefix(200))")
            #expect(try await http.store.store.stats().queueDepth == 0)
        }
    }
}
