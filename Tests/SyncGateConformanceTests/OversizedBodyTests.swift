import Foundation
import HummingbirdTesting
import NIOCore
import NIOPosix
import Synchronization
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A client that sends an oversized push without `Expect: 100-continue` reads the answer only
/// after it has written everything: it must get its `413`, and the server must not read forever.
/// Driven over a raw socket, the body written as fast as the server takes it.
@Suite(.timeLimit(.minutes(10))) struct OversizedBodyTests {
    static let limit = 100_000

    /// How much of a body the client can have written that the server never read: the largest
    /// send buffer on the client's side and receive buffer on the server's (Linux autotunes
    /// both up to the third field of `tcp_wmem` / `tcp_rmem`; 32 MiB of receive buffer here).
    static var kernelBuffers: Int {
        func largest(_ name: String) -> Int? {
            guard let text = try? String(contentsOfFile: "/proc/sys/net/ipv4/\(name)", encoding: .utf8) else { return nil }
            return text.split(whereSeparator: \.isWhitespace).last.flatMap { Int($0) }
        }
        return (largest("tcp_wmem") ?? 4 << 20) + (largest("tcp_rmem") ?? 6 << 20)
    }

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
    /// (a whole answer, or what there was when the server closed), and whether it closed.
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
        // Until the answer is whole or the server closed (a loaded machine may take seconds); the
        // hang guard only ends a wait for an answer that never comes.
        let deadline = ContinuousClock.now + hangGuard
        while ContinuousClock.now < deadline, channel.isActive, !collector.text.contains("\r\n\r\n{") || !collector.text.hasSuffix("}") {
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

            // Far past it: the server closes once it has read the limit and 8 MiB (OversizedBodyGuard's
            // lingering allowance), and the 413 still arrived. What the client wrote beyond that lies
            // in the sockets' buffers; the body is larger than all three together.
            let readable = Self.limit + (8 << 20)
            let bodyBytes = max(64 << 20, 2 * (readable + Self.kernelBuffers))
            let huge = try await Self.send(port: port, token: token, bodyBytes: bodyBytes, chunked: chunked)
            #expect(huge.sent <= readable + Self.kernelBuffers, "the client wrote \(huge.sent) bytes of a \(bodyBytes)-byte body")
            #expect(huge.closed)
            #expect(huge.answer.hasPrefix("HTTP/1.1 413"), "\(huge.answer.prefix(200))")
            #expect(try await http.store.store.stats().queueDepth == 0)
        }
    }

    /// A client that asks the server to close after the answer (`Connection: close`) and writes
    /// its whole body before it reads — Python's urllib, many HTTP/1.0-style clients and proxies —
    /// gets its 413 too: the server reads and discards the rest of the body, then closes, instead
    /// of resetting a connection the client is still writing to (a broken pipe, no answer).
    @Test func aClientThatWritesEverythingAndAsksToCloseGetsIts413() async throws {
        var configuration = HTTPHarness.testConfiguration
        configuration.maximumBodyBytes = Self.limit
        try await HTTPHarness.with(.sqlite, setup: .live, configuration: configuration, workers: 0) { http in
            let port = try #require(http.client.port)
            // More than the sockets' buffers hold, less than the discarding allowance (the limit + 8 MiB).
            let bodyBytes = 6_000_000
            let head = "POST /v1/sync/push HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(try await http.token())\r\nX-Device-Id: d1\r\n"
                + "Content-Type: application/json\r\nConnection: close\r\nContent-Length: \(bodyBytes)\r\n\r\n"
            let exchange = await Self.writeEverythingThenRead(port: port, head: head, bodyBytes: bodyBytes)
            #expect(exchange.failure == nil, "\(exchange.failure ?? "")")
            #expect(exchange.written == bodyBytes)
            #expect(exchange.answer.hasPrefix("HTTP/1.1 413") && exchange.answer.contains("PAYLOAD_TOO_LARGE"), "\(exchange.answer.prefix(300))")
            #expect(try await http.store.store.stats().queueDepth == 0)
        }
    }

    /// Writes `head` and `bodyBytes` of body with blocking calls, then reads until the server
    /// closes, on a thread of its own, as a client that reads only once it has sent everything.
    static func writeEverythingThenRead(port: Int, head: String, bodyBytes: Int) async -> (written: Int, failure: String?, answer: String) {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                defer { close(socket) }
                var timeout = timeval(tv_sec: Int(hangGuard.components.seconds), tv_usec: 0)
                setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                var address = sockaddr_in()
                address.sin_family = sa_family_t(AF_INET)
                address.sin_port = in_port_t(UInt16(port).bigEndian)
                address.sin_addr.s_addr = inet_addr("127.0.0.1")
                let connected = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
                guard connected == 0 else { return continuation.resume(returning: (0, "connect: \(String(cString: strerror(errno)))", "")) }
                func sendAll(_ bytes: [UInt8]) -> String? {
                    var offset = 0
                    while offset < bytes.count {
                        let sent = bytes[offset...].withUnsafeBytes { Glibc.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                        if sent <= 0 { return String(cString: strerror(errno)) }
                        offset += sent
                    }
                    return nil
                }
                if let failure = sendAll(Array(head.utf8)) { return continuation.resume(returning: (0, "writing the head: \(failure)", "")) }
                var written = 0
                let piece = [UInt8](repeating: UInt8(ascii: " "), count: 64 * 1024)
                while written < bodyBytes {
                    let size = min(piece.count, bodyBytes - written)
                    if let failure = sendAll(Array(piece[..<size])) {
                        return continuation.resume(returning: (written, "writing the body after \(written) bytes: \(failure)", ""))
                    }
                    written += size
                }
                var answer: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while true {
                    let count = buffer.withUnsafeMutableBytes { Glibc.recv(socket, $0.baseAddress, $0.count, 0) }
                    if count == 0 { break }
                    if count < 0 {
                        let failure = String(cString: strerror(errno))
                        return continuation.resume(returning: (written, "reading: \(failure)", String(decoding: answer, as: UTF8.self)))
                    }
                    answer += buffer[..<count]
                }
                continuation.resume(returning: (written, nil, String(decoding: answer, as: UTF8.self)))
            }
        }
    }
}
