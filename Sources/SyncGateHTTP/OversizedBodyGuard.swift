public import NIOCore
public import NIOHTTPTypes

/// Closes a connection once a request body runs `lingerBytes` past the body limit.
///
/// A client that sends an oversized body without `Expect: 100-continue` (most mobile HTTP stacks)
/// reads the answer only after it has sent everything. The push route answers `413` as soon as it
/// knows (from `Content-Length`, or once a chunked body passes the limit) and Hummingbird goes on
/// reading and discarding the rest, so such a client gets its `413`; without a bound, a client
/// could make the server read forever. Past the limit plus `lingerBytes` (nginx's lingering close,
/// by bytes) the connection is closed.
///
/// Written by hand: Hummingbird bounds a body only where a route collects it.
public final class OversizedBodyGuard: ChannelInboundHandler, RemovableChannelHandler {
    public typealias InboundIn = HTTPRequestPart
    public typealias InboundOut = HTTPRequestPart

    private let cap: Int
    private var received = 0

    public init(maximumBodyBytes: Int, lingerBytes: Int = 8 << 20) {
        let (sum, overflow) = maximumBodyBytes.addingReportingOverflow(lingerBytes)
        cap = overflow ? .max : sum
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head, .end:
            received = 0
        case .body(let buffer):
            received += buffer.readableBytes
            if received > cap {
                context.close(promise: nil)
                return
            }
        }
        context.fireChannelRead(data)
    }
}

@available(*, unavailable)
extension OversizedBodyGuard: Sendable {}
