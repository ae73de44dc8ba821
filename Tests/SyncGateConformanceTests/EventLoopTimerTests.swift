import NIOCore
import NIOPosix
import Synchronization
@testable import SyncGateStorage
import Testing

/// The process's timer wheel on a real event loop (its bookkeeping: TimerSlotsTests).
@Suite struct EventLoopTimerTests {
    private func wheel() -> EventLoopTimer {
        EventLoopTimer(eventLoop: MultiThreadedEventLoopGroup.singleton.next(), resolution: .milliseconds(5), slots: 16)
    }

    @Test func timersFireOnceAfterTheirDelayAndNotBefore() async throws {
        let wheel = wheel()
        let fired = Mutex<[Int: ContinuousClock.Instant]>([:])
        let start = ContinuousClock.now
        for (index, delay) in [0, 30, 120, 400].enumerated() {   // 400 ms is past one round of 16 × 5 ms
            wheel.after(.milliseconds(delay)) { fired.withLock { $0[index] = $0[index] == nil ? .now : start } }
        }
        try await Task.sleep(for: .milliseconds(700))
        let times = fired.withLock { $0 }
        #expect(times.count == 4)
        for (index, delay) in [0, 30, 120, 400].enumerated() {
            let at = try #require(times[index])
            #expect(at >= start + .milliseconds(delay), "timer \(index) fired early")
            #expect(at < start + .milliseconds(delay + 250), "timer \(index) fired late")
        }
    }

    @Test func aCancelledTimerDoesNotFire() async throws {
        let wheel = wheel()
        let fired = Atomic<Int>(0)
        let timers = (0..<1000).map { _ in wheel.after(.milliseconds(50)) { fired.add(1, ordering: .relaxed) } }
        for timer in timers.prefix(990) { timer.cancel() }
        try await Task.sleep(for: .milliseconds(300))
        #expect(fired.load(ordering: .relaxed) == 10)
        timers.last?.cancel()   // after it fired: harmless
    }

    @Test func aRepeatingTimerRunsUntilItSaysStopOrIsCancelled() async throws {
        let wheel = wheel()
        let runs = Atomic<Int>(0)
        _ = wheel.every(.milliseconds(10)) { runs.add(1, ordering: .relaxed).newValue < 3 }
        let cancelled = Atomic<Int>(0)
        let repeating = wheel.every(.milliseconds(10)) { cancelled.add(1, ordering: .relaxed); return true }
        try await Task.sleep(for: .milliseconds(200))
        repeating.cancel()
        let atCancel = cancelled.load(ordering: .relaxed)
        try await Task.sleep(for: .milliseconds(100))
        #expect(runs.load(ordering: .relaxed) == 3)
        #expect(atCancel >= 3)
        #expect(cancelled.load(ordering: .relaxed) <= atCancel + 1, "at most a run already under way when cancelled")
    }

    /// A timer added after a later one still fires at its own time.
    @Test func anEarlierTimerAddedLaterIsNotHeldBack() async throws {
        let wheel = wheel()
        let start = ContinuousClock.now
        let late = Mutex<ContinuousClock.Instant?>(nil)
        let early = Mutex<ContinuousClock.Instant?>(nil)
        wheel.after(.milliseconds(400)) { late.withLock { $0 = .now } }
        wheel.after(.milliseconds(20)) { early.withLock { $0 = .now } }
        try await Task.sleep(for: .milliseconds(600))
        let earlyAt = try #require(early.withLock { $0 })
        let lateAt = try #require(late.withLock { $0 })
        #expect(earlyAt < start + .milliseconds(250), "the 20 ms timer waited for the 400 ms one")
        #expect(lateAt >= start + .milliseconds(400))
    }

    /// The loop wakes at ticks that hold timers, not at every tick: a lone timer 80 ticks ahead
    /// costs a wake-up or two (one per round of the wheel it spans), not 80.
    @Test func theLoopWakesOnlyWhenSomethingIsDue() async throws {
        let wheel = wheel()
        let fired = Atomic<Int>(0)
        wheel.after(.milliseconds(400)) { fired.add(1, ordering: .relaxed) }
        try await Task.sleep(for: .milliseconds(600))
        #expect(fired.load(ordering: .relaxed) == 1)
        #expect(wheel.wakeUps.load(ordering: .relaxed) <= 8, "woke \(wheel.wakeUps.load(ordering: .relaxed)) times for one timer")
    }

    /// The wheel stops ticking when it holds no timer and starts again with the next one.
    @Test func aWheelThatEmptiedStartsAgain() async throws {
        let wheel = wheel()
        let fired = Atomic<Int>(0)
        wheel.after(.milliseconds(10)) { fired.add(1, ordering: .relaxed) }
        try await Task.sleep(for: .milliseconds(100))
        wheel.after(.milliseconds(10)) { fired.add(1, ordering: .relaxed) }
        try await Task.sleep(for: .milliseconds(100))
        #expect(fired.load(ordering: .relaxed) == 2)
    }
}
