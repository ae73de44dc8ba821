package import NIOCore
package import NIOHTTPTypes

/// Bounds how much of an unwanted request body the server reads, and lets the client that sent
/// it read the answer: nginx's lingering close, by bytes and by time.
///
/// A client that sends an oversized body without `Expect: 100-continue` (most mobile HTTP stacks,
/// Python's urllib) reads the answer only after it has written everything. The push route answers
/// `413` as soon as it knows (from `Content-Length`, or once a chunked body passes the limit):
/// - on a keep-alive connection Hummingbird reads and discards the rest of the body; past the
///   limit plus `lingerBytes` the connection is closed, so a client cannot make it read forever;
/// - when the connection is to close after the answer (`Connection: close`, HTTP/1.0), closing
///   it with the body's bytes unread would reset it, and the client, still writing, would see a
///   broken pipe instead of the `413`. So a close while a body is still arriving only shuts the
///   output once the answer is written, then reads and discards until the body ends, the client
///   closes, `lingerBytes` more arrive or `lingerTime` passes; then it closes.
///
/// Written by hand: Hummingbird bounds a body only where a route collects it, and closes at once.
package final class OversizedBodyGuard: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = HTTPRequestPart
    package typealias InboundOut = HTTPRequestPart
    package typealias OutboundIn = HTTPResponsePart
    package typealias OutboundOut = HTTPResponsePart

    private let cap: Int
    private let lingerTime: TimeAmount
    private var received = 0
    /// A request's head arrived and its end has not.
    private var inBody = false
    /// Closing once the body being discarded ends: the close's promise and the time bound.
    private var lingering: (promise: EventLoopPromise<Void>?, deadline: Scheduled<Void>)?

    package init(maximumBodyBytes: Int, lingerBytes: Int = 8 << 20, lingerTime: TimeAmount = .seconds(10)) {
        let (sum, overflow) = maximumBodyBytes.addingReportingOverflow(lingerBytes)
        cap = overflow ? .max : sum
        self.lingerTime = lingerTime
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        switch part {
        case .head:
            received = 0
            inBody = true
        case .body(let buffer):
            received += buffer.readableBytes
            if received > cap {
                closeNow(context: context)
                return
            }
        case .end:
            received = 0
            inBody = false
        }
        guard lingering == nil else {
            // Discarded: the request was answered already.
            if case .end = part { closeNow(context: context) }
            return
        }
        context.fireChannelRead(data)
    }

    package func channelReadComplete(context: ChannelHandlerContext) {
        // Nothing above asks for more while lingering: keep reading until the body ends.
        if lingering != nil { context.read() } else { context.fireChannelReadComplete() }
    }

    package func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        guard inBody, mode != .input else {
            context.close(mode: mode, promise: promise)
            return
        }
        if let lingering {
            // Already lingering: a full close completes when the lingering close does.
            if mode == .all, let promise {
                if let held = lingering.promise { held.futureResult.cascade(to: promise) } else { self.lingering?.promise = promise }
            } else {
                promise?.succeed(())
            }
            return
        }
        let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        let deadline = context.eventLoop.scheduleTask(in: lingerTime) { bound.value.handler.closeNow(context: bound.value.context) }
        lingering = (mode == .all ? promise : nil, deadline)
        if mode == .output { promise?.succeed(()) }
        // The answer goes out first: NIO shuts the output once the pending writes are written.
        let shut = context.eventLoop.makePromise(of: Void.self)
        shut.futureResult.whenFailure { _ in bound.value.handler.closeNow(context: bound.value.context) }
        context.close(mode: .output, promise: shut)
        context.read()
    }

    package func channelInactive(context: ChannelHandlerContext) {
        if let lingering {
            self.lingering = nil
            lingering.deadline.cancel()
            lingering.promise?.succeed(())
        }
        context.fireChannelInactive()
    }

    /// Closes the connection for good, completing a close held back while lingering.
    private func closeNow(context: ChannelHandlerContext) {
        let promise = lingering?.promise
        lingering?.deadline.cancel()
        lingering = nil
        context.close(mode: .all, promise: promise)
    }
}

@available(*, unavailable)
extension OversizedBodyGuard: Sendable {}
