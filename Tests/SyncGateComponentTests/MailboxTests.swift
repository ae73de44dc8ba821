import NIOCore
import NIOPosix
import Synchronization
@testable import SyncGateRuntime
import SyncGateTestSupport
import Testing

/// The mailbox every waiting subscription and live connection sleeps in, on a real event loop's
/// timer wheel. Deadlines are never early. A wait that must end by a delivery, a close or a
/// cancellation has a deadline longer than the test's time limit, so only that event can end it;
/// the time it took is bounded by the hang guard alone.
@Suite(.timeLimit(.minutes(10))) struct MailboxTests {
    /// A deadline no test lives to see.
    static let never: Duration = .seconds(3600)

    private func mailbox() -> Mailbox<[Int]> {
        Mailbox(timers: EventLoopTimer(eventLoop: MultiThreadedEventLoopGroup.singleton.next(), resolution: .milliseconds(5), slots: 16))
    }

    private func deliver(_ values: [Int], to mailbox: Mailbox<[Int]>) {
        mailbox.deliver { pending in pending = (pending ?? []) + values }
    }

    @Test func whatWasDeliveredBeforeTheWaitIsTakenAtOnceAndMerged() async {
        let mailbox = mailbox()
        deliver([1], to: mailbox)
        deliver([2, 3], to: mailbox)
        let started = ContinuousClock.now
        guard case .delivered(let values) = await mailbox.wait(until: .now + Self.never) else {
            Issue.record("expected the deliveries")
            return
        }
        #expect(values == [1, 2, 3])
        #expect(started.duration(to: .now) < hangGuard)
        // Taken: the next wait finds nothing.
        guard case .timedOut = await mailbox.wait(until: .now + .milliseconds(20)) else {
            Issue.record("a second wait should time out")
            return
        }
    }

    @Test func aWaitEndsAtItsDeadlineAndNotBefore() async {
        let mailbox = mailbox()
        let started = ContinuousClock.now
        let outcome = await mailbox.wait(until: started + .milliseconds(80))
        guard case .timedOut = outcome else {
            Issue.record("expected a timeout, got \(outcome)")
            return
        }
        #expect(started.duration(to: .now) >= .milliseconds(80))
    }

    @Test func aDeliveryWakesASleepingWaiterLongBeforeItsDeadline() async throws {
        let mailbox = mailbox()
        async let outcome = mailbox.wait(until: .now + Self.never)
        try await eventually("the waiter asleep") { mailbox.hasSleepingWaiter }
        let delivered = ContinuousClock.now
        deliver([7], to: mailbox)
        guard case .delivered(let values) = await outcome else {
            Issue.record("expected the delivery")
            return
        }
        #expect(values == [7])
        #expect(delivered.duration(to: .now) < hangGuard)
    }

    /// A closing process stops waiting whatever came: close wins over what is pending, ends the
    /// sleeping waiter, every later wait, and drops later deliveries.
    @Test func closeEndsTheWaitAndEveryLaterOneAndWinsOverDeliveries() async throws {
        let mailbox = mailbox()
        async let outcome = mailbox.wait(until: .now + Self.never)
        try await eventually("the waiter asleep") { mailbox.hasSleepingWaiter }
        mailbox.close()
        guard case .closed = await outcome else {
            Issue.record("a close should end the sleeping wait")
            return
        }
        deliver([1], to: mailbox)
        guard case .closed = await mailbox.wait(until: .now + .seconds(60)) else {
            Issue.record("a closed mailbox answers closed")
            return
        }
        #expect(mailbox.isClosed)

        let pendingThenClosed = self.mailbox()
        deliver([1], to: pendingThenClosed)
        pendingThenClosed.close()
        guard case .closed = await pendingThenClosed.wait(until: .now + .seconds(60)) else {
            Issue.record("close should win over a pending delivery")
            return
        }
    }

    /// A cancelled task's wait ends at once as `closed`, so its loop ends instead of spinning.
    @Test func cancellingTheWaitingTaskEndsTheWait() async throws {
        let mailbox = mailbox()
        let waiting = Task { await mailbox.wait(until: .now + Self.never) }
        try await eventually("the waiter asleep") { mailbox.hasSleepingWaiter }
        let cancelled = ContinuousClock.now
        waiting.cancel()
        guard case .closed = await waiting.value else {
            Issue.record("a cancelled wait should answer closed")
            return
        }
        #expect(cancelled.duration(to: .now) < hangGuard)
        // The mailbox itself stays open for a next waiter.
        #expect(!mailbox.isClosed)
        deliver([4], to: mailbox)
        guard case .delivered([4]) = await mailbox.wait(until: .now + .seconds(5)) else {
            Issue.record("the mailbox should still deliver")
            return
        }
    }

    /// An earlier wait's timer, left behind when a delivery ended that wait, must not cut a later
    /// wait short. Two things see to it: the delivery cancels the timer, and a timer that fires
    /// anyway (already firing when cancelled: a race no test can schedule) ends only the wait it
    /// was set for. This fails when both are gone.
    @Test func aStaleTimerDoesNotEndALaterWait() async throws {
        // The delivery must come before the first wait's deadline; a loaded machine can make it
        // late, which proves nothing either way: that round is run again.
        for _ in 0..<20 {
            let mailbox = mailbox()
            async let first = mailbox.wait(until: .now + .milliseconds(500))
            try await Task.sleep(for: .milliseconds(20))
            deliver([1], to: mailbox)
            guard case .delivered = await first else { continue }
            let started = ContinuousClock.now
            guard case .timedOut = await mailbox.wait(until: started + .milliseconds(1000)) else {
                Issue.record("the second wait should time out")
                return
            }
            #expect(started.duration(to: .now) >= .milliseconds(1000), "the first wait's timer ended the second early")
            return
        }
        Issue.record("in 20 rounds no delivery came within 480 ms of its wait")
    }

    /// Deliveries from many tasks while one task waits in a loop: nothing is lost or taken twice.
    @Test func concurrentDeliveriesAreEachTakenOnce() async throws {
        let mailbox = mailbox()
        let senders = 8, each = 200
        try await withThrowingTaskGroup(of: Void.self) { group in
            for sender in 0..<senders {
                group.addTask {
                    for index in 0..<each {
                        self.deliver([sender * each + index], to: mailbox)
                        if index % 20 == 0 { try await Task.sleep(for: .milliseconds(1)) }
                    }
                }
            }
            var taken: [Int] = []
            let deadline = ContinuousClock.now + hangGuard
            while taken.count < senders * each, ContinuousClock.now < deadline {
                if case .delivered(let values) = await mailbox.wait(until: .now + .milliseconds(200)) { taken += values }
            }
            try await group.waitForAll()
            #expect(taken.count == senders * each)
            #expect(Set(taken).count == senders * each)
        }
    }
}
