package import NIOCore
package import NIOHTTPTypes

/// Closes a connection whose request does not arrive whole within `timeout` of its head: a
/// client that trickles a body byte by byte (slow loris) cannot hold a socket and a request task
/// forever. Hummingbird's idle timeout bounds the rest: a connection with no request in progress,
/// and a request head that never completes.
///
/// Written by hand because Hummingbird's `HTTPConnectionStateHandler` restarts its idle timer on
/// every body part, so a slow body keeps it alive, and NIO's `IdleStateHandler` measures silence
/// rather than a request's total time.
package final class RequestReadTimeoutHandler: ChannelInboundHandler, RemovableChannelHandler {
    package typealias InboundIn = HTTPRequestPart
    package typealias InboundOut = HTTPRequestPart

    private let timeout: TimeAmount
    private var scheduled: Scheduled<Void>?
    /// When the head of a request whose end has not arrived yet came.
    private var headArrived: NIODeadline?

    package init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            headArrived = .now()
        case .body:
            break
        case .end:
            headArrived = nil
            cancelTimer()
        }
        context.fireChannelRead(data)
    }

    /// The timer starts only for a request still incomplete once the bytes at hand are read: a
    /// request that arrives whole (every GET, most pushes) costs none. (Cancelling a timer costs
    /// NIO 2.101 a linear search of the loop's scheduled tasks, and a front holding many idle
    /// connections would cancel one per re-poll.)
    package func channelReadComplete(context: ChannelHandlerContext) {
        if let since = headArrived, scheduled == nil {
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            scheduled = context.eventLoop.scheduleTask(deadline: since + timeout) {
                loopBound.value.close(promise: nil)
            }
        }
        context.fireChannelReadComplete()
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        cancelTimer()
    }

    package func channelInactive(context: ChannelHandlerContext) {
        cancelTimer()
        context.fireChannelInactive()
    }

    private func cancelTimer() {
        scheduled?.cancel()
        scheduled = nil
    }
}

@available(*, unavailable)
extension RequestReadTimeoutHandler: Sendable {}
