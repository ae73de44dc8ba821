import SyncGateCore
import SyncGateWire
@testable import SyncGateStorage
import Testing

/// The notifier's index of subscriptions must deliver exactly what asking every subscription's
/// interest (`matches`, the rule written out) would: each matching event once, in order.
@Suite struct SubscriberIndexTests {
    static let devices = (0..<4).map { DeviceKey(userID: "user\($0 % 2)", deviceID: "device\($0)") }
    static let scopes: [Scope] = [.user("user0"), .user("user1")]

    static func interest(_ random: inout SeededGenerator) -> ChangeNotifier.Interest {
        .init(
            jobs: Set((0..<Int.random(in: 0...2, using: &random)).map { _ in Int64.random(in: 1...6, using: &random) }),
            devices: Set((0..<Int.random(in: 0...2, using: &random)).map { _ in devices.randomElement(using: &random)! }),
            jobsAvailable: Bool.random(using: &random),
            feeds: Int.random(in: 0..<4, using: &random) == 0
        )
    }

    static func event(_ random: inout SeededGenerator) -> StoreEvent {
        switch Int.random(in: 0..<10, using: &random) {
        case 0..<3: .jobFinishedWithoutResults(Int64.random(in: 1...6, using: &random), device: devices.randomElement(using: &random)!)
        case 3, 4:
            {
                let device = devices.randomElement(using: &random)!
                return .jobFinished(
                    FinishedJob(id: Int64.random(in: 1...6, using: &random), userID: device.userID, deviceID: device.deviceID, state: .done, results: "[]")
                )
            }()
        case 5, 6: .feedAdvanced(scopes.randomElement(using: &random)!, head: Int64.random(in: 1...3, using: &random))
        case 7: .scopesChanged(userID: "user0", version: 2)
        case 8: .jobsAvailable
        default: .resynchronize
        }
    }

    /// Brute force: every subscription asked.
    static func expected(_ interests: [Int: ChangeNotifier.Interest], _ events: [StoreEvent]) -> [Int: [StoreEvent]] {
        interests.compactMapValues { interest in
            let heard = events.filter(interest.matches)
            return heard.isEmpty ? nil : heard
        }
    }

    /// Random subscriptions come and go; after each change a random batch of events is published
    /// to both the index and the brute force.
    @Test(arguments: 0..<20)
    func theIndexDeliversWhatAskingEverySubscriptionWould(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        var index = SubscriberIndex()
        var interests: [Int: ChangeNotifier.Interest] = [:]
        for step in 0..<300 {
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<5:
                let interest = Self.interest(&random)
                index.insert(step, interest)
                interests[step] = interest
            case 5..<8:
                if let id = interests.keys.randomElement(using: &random) {
                    index.remove(id)
                    interests[id] = nil
                }
            case 8:
                // Re-subscribing an id replaces its interest.
                if let id = interests.keys.randomElement(using: &random) {
                    let interest = Self.interest(&random)
                    index.insert(id, interest)
                    interests[id] = interest
                }
            default:
                index.remove(-1)   // unknown: nothing happens
            }
            let events = (0..<Int.random(in: 0...5, using: &random)).map { _ in Self.event(&random) }
            #expect(index.recipients(of: events) == Self.expected(interests, events), "seed \(seed), step \(step)")
            #expect(index.count == interests.count)
        }
        index.removeAll()
        #expect(index.recipients(of: [.resynchronize, .jobsAvailable]).isEmpty)
    }

    /// A subscription that matches an event through several interests (its job, its device and
    /// all feeds) hears it once.
    @Test func anEventMatchedSeveralWaysIsDeliveredOnce() {
        var index = SubscriberIndex()
        let device = Self.devices[0]
        index.insert(1, .init(jobs: [5], devices: [device], feeds: true))
        let event = StoreEvent.jobFinishedWithoutResults(5, device: device)
        #expect(index.recipients(of: [event, event]) == [1: [event, event]])
        index.remove(1)
        #expect(index.recipients(of: [event]).isEmpty)
    }
}

extension ChangeNotifier.Interest {
    /// Whether this interest hears `event`: the rule the index implements, asked directly.
    func matches(_ event: StoreEvent) -> Bool {
        switch event {
        case .jobFinished(let job): feeds || jobs.contains(job.id) || devices.contains(job.device)
        case .jobFinishedWithoutResults(let id, let device): feeds || jobs.contains(id) || devices.contains(device)
        case .feedAdvanced, .scopesChanged: feeds
        case .jobsAvailable: jobsAvailable
        case .resynchronize: true
        }
    }
}
