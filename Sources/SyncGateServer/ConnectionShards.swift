import HummingbirdCore
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// Runs the server's connections in several task groups instead of one.
///
/// Hummingbird's server runs every connection as a child of one discarding task group. In the
/// Swift 6.3 runtime a group keeps its children in a singly linked list, oldest first, and a
/// child that ends is found by walking that list from the head (swiftlang/swift#87887 makes it
/// doubly linked, after 6.3). With 16,000 idle connections open, each connection that closed
/// (a long-poll client reconnecting) walked past every older one: profiled at 8,000 long-polls
/// re-polling every 30 s beside 8,000 event streams, `TaskGroup::removeChildTask` was 46 % of
/// the front's CPU. Here the server's child only hands its connection to one of `count` groups
/// (round robin) and ends, so the server's list holds only connections being handed over, and a
/// connection that ends walks past about 1/`count` of the others.
///
/// A service: add it after every service the requests use and before the server (which the
/// application runs last), so that at a graceful shutdown the server stops accepting first, then
/// this waits for the connections it runs (they see the graceful shutdown too: long-polls answer,
/// event streams end), and only then do the services they use stop.
final class ConnectionShards: Service, Sendable {
    typealias Connection = @Sendable () async -> Void

    private let streams: [AsyncStream<Connection>]
    private let continuations: [AsyncStream<Connection>.Continuation]
    private let next = Atomic<Int>(0)

    init(count: Int = 64) {
        precondition(count > 0)
        (streams, continuations) = (0..<count).reduce(into: ([], [])) { pairs, _ in
            let (stream, continuation) = AsyncStream<Connection>.makeStream()
            pairs.0.append(stream)
            pairs.1.append(continuation)
        }
    }

    func run() async {
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { shards in
                for stream in streams {
                    shards.addTask {
                        await withDiscardingTaskGroup { connections in
                            for await connection in stream {
                                connections.addTask(operation: connection)
                            }
                        }
                    }
                }
            }
        } onGracefulShutdown: {
            // Connections handed over already keep running; each group ends when they do.
            self.finish()
        }
    }

    /// Runs `connection` in one of the groups; `false` if they no longer take connections (the
    /// service is stopping or not running), and then the caller runs it itself.
    func submit(_ connection: @escaping Connection) -> Bool {
        let shard = next.wrappingAdd(1, ordering: .relaxed).oldValue % continuations.count
        if case .enqueued = continuations[shard].yield(connection) { return true }
        return false
    }

    func finish() {
        for continuation in continuations { continuation.finish() }
    }
}

/// A server child channel whose connections run in ``ConnectionShards``.
struct ShardedChildChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value

    let base: Base
    let shards: ConnectionShards

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        base.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        let base = self.base
        if shards.submit({ await base.handle(value: value, logger: logger) }) { return }
        await base.handle(value: value, logger: logger)
    }
}
