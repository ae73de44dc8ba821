import SyncGateCore
import SyncGateWire

/// The notifier's subscriptions by what they listen for, so that publishing an event costs the
/// subscriptions it reaches rather than a pass over every one: a front holds a subscription per
/// waiting push (by device), and hears a `jobFinished` for every job any front's push queued.
/// Pure bookkeeping; ``ChangeNotifier`` holds it under its lock. Who hears what: a finished job
/// reaches the subscriptions to its id or its device and every all-feeds one; a feed or scopes
/// change, the all-feeds ones; jobs available, the ones that asked for it; a resynchronize,
/// everyone (`SubscriberIndexTests` holds the index to that rule asked of every subscription).
struct SubscriberIndex {
    private var interests: [Int: ChangeNotifier.Interest] = [:]
    private var byJob: [Int64: Set<Int>] = [:]
    private var byDevice: [DeviceKey: Set<Int>] = [:]
    private var jobsAvailable: Set<Int> = []
    private var feeds: Set<Int> = []

    var count: Int { interests.count }

    mutating func insert(_ id: Int, _ interest: ChangeNotifier.Interest) {
        remove(id)
        interests[id] = interest
        for job in interest.jobs { byJob[job, default: []].insert(id) }
        for device in interest.devices { byDevice[device, default: []].insert(id) }
        if interest.jobsAvailable { jobsAvailable.insert(id) }
        if interest.feeds { feeds.insert(id) }
    }

    mutating func remove(_ id: Int) {
        guard let interest = interests.removeValue(forKey: id) else { return }
        for job in interest.jobs { Self.remove(id, from: job, in: &byJob) }
        for device in interest.devices { Self.remove(id, from: device, in: &byDevice) }
        jobsAvailable.remove(id)
        feeds.remove(id)
    }

    mutating func removeAll() {
        self = SubscriberIndex()
    }

    /// Each subscription that hears any of `events`, with the ones it hears, in their order.
    func recipients(of events: [StoreEvent]) -> [Int: [StoreEvent]] {
        var delivery: [Int: [StoreEvent]] = [:]
        for event in events {
            func send<Ids: Sequence<Int>>(to ids: Ids) {
                for id in ids { delivery[id, default: []].append(event) }
            }
            switch event {
            case .jobFinished, .jobFinishedWithoutResults:
                guard let (job, device) = event.finishedJob else { continue }
                // One event once per subscription, whichever of its interests it matched.
                var heard = feeds
                heard.formUnion(byJob[job] ?? [])
                heard.formUnion(byDevice[device] ?? [])
                send(to: heard)
            case .feedAdvanced, .scopesChanged:
                send(to: feeds)
            case .jobsAvailable:
                send(to: jobsAvailable)
            case .resynchronize:
                send(to: interests.keys)
            }
        }
        return delivery
    }

    private static func remove<Key: Hashable>(_ id: Int, from key: Key, in index: inout [Key: Set<Int>]) {
        index[key]?.remove(id)   // in place
        if index[key]?.isEmpty == true { index[key] = nil }
    }
}
