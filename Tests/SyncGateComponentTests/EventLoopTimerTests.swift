import NIOCore
import NIOPosix
import Synchronization
@testable import SyncGateRuntime
import SyncGateTestSupport
import Testing

/// The process's timer wheel on a real event loop (its bookkeeping: TimerSlotsTests). Timers
/// must never fire early; how late they fire is left to the hang guard, since a loaded CI
/// machine delays the loop.
@Suite(.timeLimit(.minutes(10))) struct EventLoopTimerTests {
    private func wheel() -> EventLoopTimer {
        EventLoopTimer(eventLoop: MultiThreadedEventLoopGroup.singleton.next(), resolution: .milliseconds(5), slots: 16)
    }

    /// Polls `condition` until it holds or `timeout` passes.
    private func eventually(_ timeout: Duration = hangGuard, _ condition: () -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            guard ContinuousClock.now < deadline else { return false }
            try await Task.sleep(for: .milliseconds(10))
        }
        return true
    }

    /// Waits until a sentinel timer due `delay` from now has fired: the wheel fires in due
    /// order, so every timer due before it has fired by then too (however slow the loop), and
    /// what has not fired was not due. This stands in for "and nothing more happened".
    private func passed(_ delay: Duration, on wheel: EventLoopTimer) async throws {
        let fired = Atomic<Bool>(false)
        wheel.after(delay) { fired.store(true, ordering: .releasing) }
        #expect(try await eventually { fired.load(ordering: .acquiring) }, "the sentinel timer never fired")
    }

    @Test func timersFireOnceAfterTheirDelayAndNotBefore() async throws {
        let wheel = wheel()
        let delays = [0, 30, 120, 400]   // 400 ms spans five rounds of 16 × 5 ms
        let fired = Mutex<[Int: [ContinuousClock.Instant]]>([:])
        let start = ContinuousClock.now
        for (index, delay) in delays.enumerated() {
            wheel.after(.milliseconds(delay)) { fired.withLock { $0[index, default: []].append(.now) } }
        }
        #expect(try await eventually { fired.withLock { $0.count } == delays.count })
        try await passed(.milliseconds(500), on: wheel)
        let times = fired.withLock { $0 }
        for (index, delay) in delays.enumerated() {
            let at = try #require(times[index])
            #expect(at.count == 1, "timer \(index) fired \(at.count) times")
            #expect(at[0] >= start + .milliseconds(delay), "timer \(index) fired early")
        }
    }

    @Test func aCancelledTimerDoesNotFire() async throws {
        let wheel = wheel()
        let fired = Atomic<Int>(0)
        let timers = (0..<1000).map { _ in wheel.after(.milliseconds(500)) { fired.add(1, ordering: .relaxed) } }
        for timer in timers.prefix(990) { timer.cancel() }
        #expect(try await eventually { fired.load(ordering: .relaxed) >= 10 })
        try await passed(.milliseconds(600), on: wheel)
        #expect(fired.load(ordering: .relaxed) == 10)
        timers.last?.cancel()   // after it fired: harmless
    }

    /// Timers added and cancelled from many tasks while the loop ticks: each survivor fires once.
    @Test func concurrentTimersAllFireOnce() async throws {
        final class Record: Sendable {
            let counts = Mutex<[Int: Int]>([:])
            let expected = Mutex<Set<Int>>([])
        }
        let wheel = wheel()
        let record = Record()
        await withTaskGroup(of: Void.self) { group in
            for part in 0..<4 {
                group.addTask {
                    for index in 0..<500 {
                        let id = part * 1000 + index
                        let timer = wheel.after(.milliseconds(Int.random(in: 0...50))) { record.counts.withLock { $0[id, default: 0] += 1 } }
                        if index % 5 == 0 { timer.cancel() } else { record.expected.withLock { _ = $0.insert(id) } }
                        if index % 50 == 0 { try? await Task.sleep(for: .milliseconds(Int.random(in: 0...15))) }
                    }
                }
            }
        }
        let survivors = record.expected.withLock { $0 }
        #expect(try await eventually { survivors.isSubset(of: Set(record.counts.withLock { $0.keys })) }, "some timers never fired")
        try await passed(.milliseconds(150), on: wheel)
        let final = record.counts.withLock { $0 }
        #expect(final.values.allSatisfy { $0 == 1 }, "a timer fired twice")
        // A cancel can lose the race with a timer already due (0 ms): at most those fired.
        #expect(final.count >= survivors.count && final.count <= 2000)
    }

    @Test func aRepeatingTimerRunsUntilItSaysStopOrIsCancelled() async throws {
        let wheel = wheel()
        let runs = Atomic<Int>(0)
        _ = wheel.every(.milliseconds(10)) { runs.add(1, ordering: .relaxed).newValue < 3 }
        let cancelled = Atomic<Int>(0)
        let repeating = wheel.every(.milliseconds(10)) { cancelled.add(1, ordering: .relaxed); return true }
        #expect(try await eventually { runs.load(ordering: .relaxed) >= 3 && cancelled.load(ordering: .relaxed) >= 3 })
        repeating.cancel()
        let atCancel = cancelled.load(ordering: .relaxed)
        try await passed(.milliseconds(150), on: wheel)
        #expect(runs.load(ordering: .relaxed) == 3)
        #expect(cancelled.load(ordering: .relaxed) <= atCancel + 1, "at most a run already under way when cancelled")
    }

    /// A timer added after a later one still fires at its own time, not with the later one.
    @Test func anEarlierTimerAddedLaterIsNotHeldBack() async throws {
        let wheel = wheel()
        let start = ContinuousClock.now
        let late = Mutex<ContinuousClock.Instant?>(nil)
        let early = Mutex<ContinuousClock.Instant?>(nil)
        let lateTimer = wheel.after(.seconds(600)) { late.withLock { $0 = .now } }
        wheel.after(.milliseconds(20)) { early.withLock { $0 = .now } }
        #expect(try await eventually { early.withLock { $0 } != nil })
        #expect(late.withLock { $0 } == nil, "the 20 ms timer waited for the 10-minute one")
        let earlyAt = try #require(early.withLock { $0 })
        #expect(earlyAt >= start + .milliseconds(20))
        lateTimer.cancel()
    }

    /// The loop wakes at ticks that hold timers, not at every tick: a lone timer 80 ticks (five
    /// rounds of the wheel) ahead costs a wake-up per round it spans at most, not 80.
    @Test func theLoopWakesOnlyWhenSomethingIsDue() async throws {
        let wheel = wheel()
        let fired = Atomic<Int>(0)
        wheel.after(.milliseconds(400)) { fired.add(1, ordering: .relaxed) }
        #expect(try await eventually { fired.load(ordering: .relaxed) == 1 })
        #expect(wheel.wakeUps.load(ordering: .relaxed) <= 8, "woke \(wheel.wakeUps.load(ordering: .relaxed)) times for one timer")
    }

    /// The wheel stops when it holds no timer and starts again with the next one.
    @Test func aWheelThatEmptiedStartsAgain() async throws {
        let wheel = wheel()
        let fired = Atomic<Int>(0)
        wheel.after(.milliseconds(10)) { fired.add(1, ordering: .relaxed) }
        #expect(try await eventually { fired.load(ordering: .relaxed) == 1 })
        try await Task.sleep(for: .milliseconds(50))
        wheel.after(.milliseconds(10)) { fired.add(1, ordering: .relaxed) }
        #expect(try await eventually { fired.load(ordering: .relaxed) == 2 })
    }
}
