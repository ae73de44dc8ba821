public import NIOCore
import NIOPosix

/// One-shot timers on the process's event loops, for the deadlines of waits and database calls.
///
/// A wait that races its work against `Task.sleep` costs a child task and a dispatch timer each
/// time — per request and per database call, several percent of a busy front's CPU. An event
/// loop's timer is an entry in a heap it already keeps.
public enum EventLoopTimer {
    /// Runs `action` after `delay` on one of the process's event loops (at once when it is not
    /// positive); cancel the returned handle to drop it.
    @discardableResult
    public static func after(_ delay: Duration, _ action: @escaping @Sendable () -> Void) -> Scheduled<Void> {
        let (seconds, attoseconds) = delay.components
        let nanoseconds = seconds > Int64.max / 1_000_000_000 ? Int64.max : seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        return MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: .nanoseconds(max(0, nanoseconds))) { action() }
    }
}
