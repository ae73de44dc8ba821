import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization
@testable import SyncGateServer
import SyncGateTestSupport
import Testing

/// The server's connections run in ``ConnectionShards``: they must run at once, and a graceful
/// shutdown must wait for the ones running (as Hummingbird's own task group did) while refusing
/// new ones, so the services their requests use are not stopped under them.
@Suite(.timeLimit(.minutes(10))) struct ConnectionShardsTests {
    @Test func connectionsRunConcurrentlyAndAGracefulShutdownWaitsForThem() async throws {
        let shards = ConnectionShards(count: 4)
        let group = ServiceGroup(services: [shards], logger: Logger(label: "test"))
        let (release, releasing) = AsyncStream<Void>.makeStream()
        let started = Atomic<Int>(0)
        final class Counter: Sendable { let value = Atomic<Int>(0) }
        let finished = Counter()
        try await withThrowingTaskGroup(of: Int.self) { tasks in
            // How many connections had finished when the group's run ended.
            tasks.addTask {
                try await group.run()
                return finished.value.load(ordering: .relaxed)
            }
            for _ in 0..<10 {
                let submitted = shards.submit {
                    started.add(1, ordering: .relaxed)
                    for await _ in release {}
                    finished.value.add(1, ordering: .relaxed)
                }
                #expect(submitted)
            }
            // All ten run at once, each held open: none waits for another.
            try await eventually("ten connections running", every: .milliseconds(10)) { started.load(ordering: .relaxed) == 10 }

            await group.triggerGracefulShutdown()
            // After the signal a connection is the caller's to run (the server has stopped
            // accepting). The signal reaches the shards' service on its own task: a fixed 200 ms
            // was not always enough on a loaded machine. (An empty connection submitted before
            // it runs and ends at once.)
            try await eventually("the shards to refuse new connections", every: .milliseconds(10)) { !shards.submit {} }

            // The group's run ends only once the held connections finished (all ten, when it ends).
            releasing.finish()
            #expect(try await tasks.next() == 10)
        }
    }

    /// A connection's task runs on its channel's event loop, its continuations too.
    @Test func aTaskPreferringAnEventLoopRunsOnIt() async throws {
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let executor = EventLoopTaskExecutor.of(loop)
        #expect(EventLoopTaskExecutor.of(loop) === executor)
        let onLoop = await withTaskExecutorPreference(executor) { () async -> [Bool] in
            var seen = [loop.inEventLoop]
            try? await Task.sleep(for: .milliseconds(10))
            seen.append(loop.inEventLoop)
            return seen
        }
        #expect(onLoop == [true, true])
    }
}
