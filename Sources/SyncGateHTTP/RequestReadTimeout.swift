public import NIOCore
public import NIOHTTPTypes

/// Closes a connection whose request does not arrive whole within `timeout` of its head: a
/// client that trickles a body byte by byte (slow loris) cannot hold a socket and a request task
/// forever. Hummingbird's idle timeout bounds the rest: a connection with no request in progress,
/// and a request head that never completes.
///
/// Written by hand because Hummingbird's `HTTPConnectionStateHandler` restarts its idle timer on
/// every body part, so a slow body keeps it alive, and NIO's `IdleStateHandler` measures silence
/// rather than a request's total time.
public final class RequestReadTimeoutHandler: ChannelInboundHandler, RemovableChannelHandler {
    public typealias InboundIn = HTTPRequestPart
    public typealias InboundOut = HTTPRequestPart

    private let timeout: TimeAmount
    private var scheduled: Scheduled<Void>?

    public init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            scheduled?.cancel()
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            scheduled = context.eventLoop.scheduleTask(in: timeout) {
                loopBound.value.close(promise: nil)
            }
        case .body:
            break
        case .end:
            scheduled?.cancel()
            scheduled = nil
        }
        context.fireChannelRead(data)
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        scheduled?.cancel()
        scheduled = nil
    }

    public func channelInactive(context: ChannelHandlerContext) {
        scheduled?.cancel()
        scheduled = nil
        context.fireChannelInactive()
    }
}

@available(*, unavailable)
extension RequestReadTimeoutHandler: Sendable {}
