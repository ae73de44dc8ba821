import Foundation
import HummingbirdTesting
import NIOCore
import NIOPosix
import SyncGateTestSupport
import Testing

/// How answers reach the socket, through the production application.
@Suite(.timeLimit(.minutes(10))) struct ResponseWriteTests {
    /// An answer the front holds whole (every JSON answer) leaves in one write, head and body
    /// together, as Hummingbird writes a body it holds whole: not the head, then the body a task
    /// hop later (two writes, two TCP segments, and two reads on the client, for each answer).
    @Test func anAnswerHeldWholeLeavesInOneWrite() async throws {
        try await HTTPHarness.with(.sqlite, setup: .live, workers: 0) { http in
            let port = try #require(http.client.port)
            let token = try await http.token()
            let request = "GET /v1/sync/pull HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\nX-Device-Id: d1\r\n\r\n"
            let reads = try await AnswerReadCounter.reads(port: port, request: request, times: 20)
            #expect(reads.allSatisfy { $0 == 1 }, "reads per answer: \(reads)")
        }
    }
}

/// Counts the reads that bring each answer (with a `Content-Length`) on one keep-alive
/// HTTP/1.1 connection, one request at a time. Its state is touched on its channel's event loop
/// only.
final class AnswerReadCounter: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer

    private var received = ByteBuffer()
    private var reads = 0
    private var waiting: EventLoopPromise<Int>?

    /// Sends `request` `times` times, each after the answer to the one before: the reads each answer took.
    static func reads(port: Int, request: String, times: Int) async throws -> [Int] {
        let counter = AnswerReadCounter()
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(counter) }
            }
            .connect(host: "127.0.0.1", port: port).get()
        defer { channel.close(promise: nil) }
        var counts: [Int] = []
        for _ in 0..<times {
            let answered = channel.eventLoop.makePromise(of: Int.self)
            try await channel.eventLoop.submit { counter.waiting = answered }.get()
            try await channel.writeAndFlush(ByteBuffer(string: request)).get()
            counts.append(try await answered.futureResult.get())
        }
        return counts
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var chunk = unwrapInboundIn(data)
        received.writeBuffer(&chunk)
        reads += 1
        guard let length = Self.answerLength(received), received.readableBytes >= length else { return }
        received.moveReaderIndex(forwardBy: length)
        received.discardReadBytes()
        waiting?.succeed(reads)
        waiting = nil
        reads = 0
    }

    func channelInactive(context: ChannelHandlerContext) {
        waiting?.fail(ChannelError.ioOnClosedChannel)
        waiting = nil
        context.fireChannelInactive()
    }

    /// The length of the answer at the start of `buffer` (its head and its `Content-Length`
    /// body), once the head is in.
    static func answerLength(_ buffer: ByteBuffer) -> Int? {
        let bytes = Array(buffer.readableBytesView)
        let separator = Array("\r\n\r\n".utf8)
        guard let headEnd = bytes.indices.first(where: { bytes[$0...].starts(with: separator) }) else { return nil }
        let head = String(decoding: bytes[..<headEnd], as: UTF8.self)
        for line in head.split(separator: "\r\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == "content-length", let length = Int(parts[1].trimmingCharacters(in: .whitespaces)) {
                return headEnd + separator.count + length
            }
        }
        return nil
    }
}
