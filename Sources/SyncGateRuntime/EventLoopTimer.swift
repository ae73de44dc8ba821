package import NIOCore
import NIOPosix
import Synchronization

/// One-shot timers for the deadlines of waits and database calls: a timing wheel of
/// ``resolution`` ticks, driven by one event loop, which wakes only at ticks that hold timers.
///
/// Written by hand because neither a task sleeping beside the work (a child task and a dispatch
/// timer each) nor NIO 2.101's own scheduled tasks scale to a front holding 16,000 connections:
/// cancelling a scheduled task searches all of its loop's tasks, and each task that fires is
/// popped from a heap whose sifting copies tasks with their retains.
/// Here a timer is added and cancelled in O(1) (``TimerSlots``), and the loop holds one task of
/// ours (the next tick with timers; briefly another when an earlier timer came). A timer fires
/// at the first tick at or after its deadline: up to one tick late, never early.
package final class EventLoopTimer: Sendable {
    /// The process's timers.
    package static let shared = EventLoopTimer(eventLoop: MultiThreadedEventLoopGroup.singleton.next(), resolution: .milliseconds(10), slots: 1024)

    /// A timer that has not fired yet is dropped by ``cancel()``.
    package struct Timer: Sendable {
        let wheel: EventLoopTimer
        let key: TimerSlots<@Sendable () -> Void>.Key?

        package func cancel() {
            guard let key else { return }
            _ = wheel.state.withLock { $0.slots.remove(key) }
        }
    }

    private struct State {
        var slots: TimerSlots<@Sendable () -> Void>
        /// The earliest tick the loop is to wake at (it may hold other, later wake-ups from before
        /// an earlier timer came; those find nothing to do).
        var wake: UInt64?

        /// The tick to schedule a wake-up at, if it is earlier than the one scheduled.
        mutating func wakeNeeded(at tick: UInt64?) -> UInt64? {
            guard let tick, wake.map({ tick < $0 }) ?? true else { return nil }
            wake = tick
            return tick
        }
    }

    let eventLoop: any EventLoop
    let resolution: Int64
    private let origin: NIODeadline
    private let state: Mutex<State>
    /// How often the loop woke for the wheel (for tests: it must not tick while nothing is due).
    let wakeUps = Atomic<Int>(0)

    package init(eventLoop: any EventLoop, resolution: TimeAmount, slots: Int) {
        self.eventLoop = eventLoop
        self.resolution = max(1, resolution.nanoseconds)
        self.origin = .now()
        self.state = Mutex(State(slots: TimerSlots(slots: slots)))
    }

    /// Runs `action` on the wheel's event loop after `delay`, or at once when it is not positive
    /// (such a timer can no longer be cancelled: callers must tolerate a late-arriving action).
    @discardableResult
    package static func after(_ delay: Duration, _ action: @escaping @Sendable () -> Void) -> Timer {
        shared.after(delay, action)
    }

    @discardableResult
    package func after(_ delay: Duration, _ action: @escaping @Sendable () -> Void) -> Timer {
        guard delay > .zero else {
            eventLoop.execute(action)
            return Timer(wheel: self, key: nil)
        }
        // NIO's conversion saturates; at most ~73 years ahead, so tick arithmetic stays within Int64.
        let nanoseconds = max(1, min(TimeAmount(delay).nanoseconds, Int64.max / 4))
        // Due at the first tick at or after the deadline.
        let sinceOrigin = (NIODeadline.now() - origin).nanoseconds + nanoseconds
        let due = UInt64((sinceOrigin + resolution - 1) / resolution)
        let (key, wake) = state.withLock { state in
            let due = max(due, state.slots.tick + 1)
            return (state.slots.add(due: due, action), state.wakeNeeded(at: due))
        }
        if let wake { schedule(wake) }
        return Timer(wheel: self, key: key)
    }

    private func schedule(_ tick: UInt64) {
        eventLoop.scheduleTask(deadline: origin + .nanoseconds(Int64(tick) * resolution)) { self.tick(tick) }
    }

    /// Fires what is due, and schedules the wake-up for the next tick that holds timers.
    private func tick(_ scheduled: UInt64) {
        wakeUps.add(1, ordering: .relaxed)
        let now = max(scheduled, UInt64(max(0, (NIODeadline.now() - origin).nanoseconds) / resolution))
        let (due, next) = state.withLock { state in
            if state.wake == scheduled { state.wake = nil }
            let due = state.slots.advance(to: now)
            return (due, state.wakeNeeded(at: state.slots.firstOccupiedTick()))
        }
        if let next { schedule(next) }
        for action in due { action() }
    }

    /// Runs `action` every `interval` until it returns `false` or the handle is cancelled.
    package func every(_ interval: Duration, _ action: @escaping @Sendable () -> Bool) -> Repeating {
        precondition(interval > .zero, "a repeating timer needs a positive interval")
        let repeating = Repeating(wheel: self)
        repeating.arm(interval, action)
        return repeating
    }

    /// A timer that re-arms itself after each run.
    package final class Repeating: Sendable {
        let wheel: EventLoopTimer
        private let current = Mutex<(timer: Timer?, cancelled: Bool)>((nil, false))

        init(wheel: EventLoopTimer) {
            self.wheel = wheel
        }

        fileprivate func arm(_ interval: Duration, _ action: @escaping @Sendable () -> Bool) {
            let timer = wheel.after(interval) { [self] in
                guard !current.withLock({ $0.cancelled }), action() else { return }
                arm(interval, action)
            }
            let cancelled = current.withLock { current in
                if !current.cancelled { current.timer = timer }
                return current.cancelled
            }
            if cancelled { timer.cancel() }
        }

        package func cancel() {
            let timer = current.withLock { current in
                current.cancelled = true
                defer { current.timer = nil }
                return current.timer
            }
            timer?.cancel()
        }
    }
}
