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
/// (a long-poll client reconnecting) walked past every older one, and
/// `TaskGroup::removeChildTask` became most of an idle front's CPU. Here the server's child only hands its connection to one of `count` groups
/// (round robin) and ends, so the server's list holds only connections being handed over, and a
/// connection that ends walks past about 1/`count` of the others.
///
/// A service: add it after every service the requests use and before the server (which the
/// application runs last), so that at a graceful shutdown the server stops accepting first, then
/// this waits for the connections it runs (they see the graceful shutdown too: long-polls answer,
/// event streams end), and only then do the services they use stop.
final class ConnectionShards: Service, Sendable {
    typealias Connection = @Sendable () async -> Void
    typealias Submission = (connection: Connection, executor: (any TaskExecutor)?)

    private let streams: [AsyncStream<Submission>]
    private let continuations: [AsyncStream<Submission>.Continuation]
    private let next = Atomic<Int>(0)

    init(count: Int = 64) {
        precondition(count > 0)
        (streams, continuations) = (0..<count).reduce(into: ([], [])) { pairs, _ in
            let (stream, continuation) = AsyncStream<Submission>.makeStream()
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
                            for await submission in stream {
                                connections.addTask(executorPreference: submission.executor, operation: submission.connection)
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

    /// Runs `connection` in one of the groups, on `executor` when given; `false` if they no
    /// longer take connections (the service is stopping or not running), and then the caller
    /// runs it itself.
    func submit(on executor: (any TaskExecutor)? = nil, _ connection: @escaping Connection) -> Bool {
        let shard = next.wrappingAdd(1, ordering: .relaxed).oldValue % continuations.count
        if case .enqueued = continuations[shard].yield((connection, executor)) { return true }
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
        // On the connection's own event loop: its reads, its writes and the handler's code run on
        // one thread instead of handing every step between the event loop and the task pool.
        let executor = EventLoopTaskExecutor.of(value.channel.eventLoop)
        if shards.submit(on: executor, { await base.handle(value: value, logger: logger) }) { return }
        await withTaskExecutorPreference(executor) { await base.handle(value: value, logger: logger) }
    }
}

/// A NIO event loop as a Swift task executor. (NIO 2.101 has event loops as serial executors
/// for actors only; a task executor for them is a few lines.)
final class EventLoopTaskExecutor: TaskExecutor, @unchecked Sendable {
    let eventLoop: any EventLoop

    private init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    /// One executor per event loop, made once.
    static func of(_ eventLoop: any EventLoop) -> EventLoopTaskExecutor {
        let id = ObjectIdentifier(eventLoop)
        return executors.withLock { executors in
            if let executor = executors[id] { return executor }
            let executor = EventLoopTaskExecutor(eventLoop: eventLoop)
            executors[id] = executor
            return executor
        }
    }

    private static let executors = Mutex<[ObjectIdentifier: EventLoopTaskExecutor]>([:])

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
