import SyncGateCore
import SyncGateWire
@testable import SyncGateStorage
import SyncGateTestSupport
import Testing

/// The in-process fan-out of store events: who hears what, and how a subscription buffers.
@Suite struct ChangeNotifierTests {
    static let device = DeviceKey(userID: "alice", deviceID: "phone")

    @Test func aSubscriptionHearsOnlyWhatItsInterestMatches() async {
        let notifier = ChangeNotifier()
        let push = notifier.subscribe(.init(jobs: [7]))
        let worker = notifier.subscribe(.init(jobsAvailable: true))
        let watcher = notifier.subscribe(.init(feeds: true))
        notifier.publish([.jobFinishedWithoutResults(7, device: Self.device), .jobFinishedWithoutResults(8, device: Self.device), .jobsAvailable, .feedAdvanced(.user("alice"), head: 3)])
        #expect(await push.next(timeout: hangGuard) == [.jobFinishedWithoutResults(7, device: Self.device)])
        #expect(await worker.next(timeout: hangGuard) == [.jobsAvailable])
        #expect(await watcher.next(timeout: hangGuard) == [
            .jobFinishedWithoutResults(7, device: Self.device), .jobFinishedWithoutResults(8, device: Self.device), .feedAdvanced(.user("alice"), head: 3),
        ])
        // Everyone hears a resynchronize.
        notifier.publish(.resynchronize)
        for subscription in [push, worker, watcher] {
            #expect(await subscription.next(timeout: hangGuard) == [.resynchronize])
        }
    }

    @Test func eventsBufferInOrderOnceEachAndCollapseIntoAResynchronizeBeyondTheLimit() async {
        let notifier = ChangeNotifier()
        let subscription = notifier.subscribe(.init(feeds: true))
        let a = StoreEvent.feedAdvanced(.user("alice"), head: 1), b = StoreEvent.feedAdvanced(.user("bob"), head: 1)
        notifier.publish([a, b])
        notifier.publish([a])
        #expect(await subscription.next(timeout: hangGuard) == [a, b])
        // Taken: the same event counts again after.
        notifier.publish(a)
        #expect(await subscription.next(timeout: hangGuard) == [a])

        for head in 0...Int64(ChangeSubscription.bufferLimit) { notifier.publish(.feedAdvanced(.user("alice"), head: head)) }
        #expect(await subscription.next(timeout: hangGuard) == [.resynchronize])
        #expect(await subscription.next(timeout: .milliseconds(20)) == [], "nothing after the collapse: a timeout")
    }

    @Test func closingEndsEverySubscriptionAndLaterOnesStartFinished() async {
        let notifier = ChangeNotifier()
        let subscription = notifier.subscribe(.init(jobsAvailable: true))
        async let waiting = subscription.next(timeout: .seconds(60))
        try? await Task.sleep(for: .milliseconds(50))
        notifier.close()
        #expect(await waiting == nil)
        #expect(subscription.isFinished)
        let late = notifier.subscribe(.init(jobsAvailable: true))
        #expect(late.isFinished)
        #expect(await late.next(timeout: .seconds(60)) == nil)
        #expect(notifier.subscriberCount == 0)
    }

    @Test func aCancelledSubscriptionLeavesTheNotifier() async {
        let notifier = ChangeNotifier()
        let subscription = notifier.subscribe(.init(jobsAvailable: true))
        #expect(notifier.subscriberCount == 1)
        subscription.cancel()
        #expect(notifier.subscriberCount == 0)
        notifier.publish(.jobsAvailable)
        #expect(await subscription.next(timeout: .seconds(60)) == nil)
    }
}
