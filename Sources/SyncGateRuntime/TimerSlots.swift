/// The bookkeeping of a hashed timing wheel, apart from any clock or event loop: timers sit in
/// `slots` buckets by the tick they are due at, are removed in O(1), and are collected by
/// ``advance(to:)``, which looks only at the buckets of the ticks it passes.
///
/// A timer due more than `slots` ticks ahead shares its bucket with nearer ones and is skipped
/// until its own round comes.
package struct TimerSlots<Action> {
    /// Names one timer, for ``remove(_:)``.
    package struct Key: Hashable, Sendable {
        let slot: Int
        let id: UInt64
    }

    private struct Entry {
        var due: UInt64
        var action: Action
    }

    private var slots: [[UInt64: Entry]]
    private var nextID: UInt64 = 0
    /// Timers added and neither collected nor removed.
    package private(set) var count = 0
    /// The last tick collected: every timer due at or before it has been handed out.
    package private(set) var tick: UInt64

    package init(slots: Int, tick: UInt64 = 0) {
        precondition(slots > 0, "a wheel needs a slot")
        self.slots = Array(repeating: [:], count: slots)
        self.tick = tick
    }

    /// Adds a timer due at tick `due`. One due at or before ``tick`` is due at the next tick.
    package mutating func add(due: UInt64, _ action: Action) -> Key {
        let due = max(due, tick + 1)
        let slot = Int(due % UInt64(slots.count))
        nextID += 1
        slots[slot][nextID] = Entry(due: due, action: action)
        count += 1
        return Key(slot: slot, id: nextID)
    }

    /// Removes a timer not yet collected; `false` when it was collected or removed already.
    @discardableResult
    package mutating func remove(_ key: Key) -> Bool {
        guard slots.indices.contains(key.slot), slots[key.slot].removeValue(forKey: key.id) != nil else { return false }
        count -= 1
        return true
    }

    /// The first tick after ``tick`` whose bucket holds a timer: no timer is due before it (one
    /// there may belong to a later round). `nil` when the wheel is empty.
    package func firstOccupiedTick() -> UInt64? {
        guard count > 0 else { return nil }
        for step in 1...UInt64(slots.count) where !slots[Int((tick + step) % UInt64(slots.count))].isEmpty {
            return tick + step
        }
        return nil
    }

    /// Collects every timer due at or before tick `now`, earliest first (added first among
    /// equals). A `now` at or before ``tick`` collects nothing.
    package mutating func advance(to now: UInt64) -> [Action] {
        guard now > tick else { return [] }
        var due: [(tick: UInt64, id: UInt64, action: Action)] = []
        // Past a whole round every bucket has been passed once.
        let steps = min(now - tick, UInt64(slots.count))
        for step in 1...steps {
            let slot = Int((tick + step) % UInt64(slots.count))
            guard !slots[slot].isEmpty else { continue }
            let found = due.count
            for (id, entry) in slots[slot] where entry.due <= now {
                due.append((entry.due, id, entry.action))
            }
            for index in found..<due.count { slots[slot][due[index].id] = nil }
        }
        tick = now
        count -= due.count
        return due.sorted { ($0.tick, $0.id) < ($1.tick, $1.id) }.map(\.action)
    }
}
