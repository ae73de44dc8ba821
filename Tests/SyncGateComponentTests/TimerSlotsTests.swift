import SyncGateCore
import Testing
import SyncGateRuntime

@Suite struct TimerSlotsTests {
    @Test func aTimerIsCollectedAtItsTickAndNotBefore() {
        var slots = TimerSlots<Int>(slots: 8)
        _ = slots.add(due: 3, 1)
        do { let result = slots.advance(to: 2); #expect(result == []) }
        do { let result = slots.advance(to: 3); #expect(result == [1]) }
        do { let result = slots.advance(to: 4); #expect(result == []) }
        #expect(slots.count == 0)
    }

    @Test func timersMoreThanARoundAheadWaitForTheirRound() {
        var slots = TimerSlots<String>(slots: 4)
        _ = slots.add(due: 2, "near")
        _ = slots.add(due: 6, "one round on")   // the same bucket as 2
        _ = slots.add(due: 14, "three rounds on")
        do { let result = slots.advance(to: 2); #expect(result == ["near"]) }
        do { let result = slots.advance(to: 5); #expect(result == []) }
        do { let result = slots.advance(to: 6); #expect(result == ["one round on"]) }
        do { let result = slots.advance(to: 13); #expect(result == []) }
        do { let result = slots.advance(to: 14); #expect(result == ["three rounds on"]) }
    }

    @Test func aJumpPastSeveralRoundsCollectsEverythingDueInOrder() {
        var slots = TimerSlots<Int>(slots: 4)
        for due in [9, 1, 30, 5, 2, 9] { _ = slots.add(due: UInt64(due), due) }
        _ = slots.add(due: 100, 100)
        do { let result = slots.advance(to: 50); #expect(result == [1, 2, 5, 9, 9, 30]) }
        #expect(slots.count == 1)
        do { let result = slots.advance(to: 100); #expect(result == [100]) }
    }

    @Test func timersDueAtTheSameTickComeInTheOrderAdded() {
        var slots = TimerSlots<Int>(slots: 16)
        for value in 0..<20 { _ = slots.add(due: 7, value) }
        do { let result = slots.advance(to: 7); #expect(result == Array(0..<20)) }
    }

    @Test func aTimerDueInThePastIsDueAtTheNextTick() {
        var slots = TimerSlots<Int>(slots: 8, tick: 10)
        _ = slots.add(due: 3, 1)
        _ = slots.add(due: 10, 2)
        do { let result = slots.advance(to: 10); #expect(result == []) }
        do { let result = slots.advance(to: 11); #expect(result == [1, 2]) }
    }

    @Test func removedTimersAreNotCollectedAndRemovingTwiceIsHarmless() {
        var slots = TimerSlots<Int>(slots: 8)
        let first = slots.add(due: 2, 1)
        let second = slots.add(due: 2, 2)
        let late = slots.add(due: 20, 3)
        do { let result = slots.remove(first); #expect(result) }
        do { let result = slots.remove(first); #expect(!result) }
        #expect(slots.count == 2)
        do { let result = slots.advance(to: 5); #expect(result == [2]) }
        do { let result = slots.remove(second); #expect(!result, "a collected timer is not there to remove") }
        do { let result = slots.remove(late); #expect(result) }
        do { let result = slots.advance(to: 100); #expect(result == []) }
        #expect(slots.count == 0)
    }

    /// Against a plain list: random adds, removes and advances agree on what fires and when.
    @Test func randomScheduleAgreesWithAPlainList() {
        var random = SeededGenerator(seed: 0x71_3e_25)
        for _ in 0..<200 {
            let slotCount = Int.random(in: 1...9, using: &random)
            var slots = TimerSlots<Int>(slots: slotCount)
            var model: [(due: UInt64, value: Int, key: TimerSlots<Int>.Key)] = []
            var now: UInt64 = 0
            for value in 0..<60 {
                switch Int.random(in: 0..<10, using: &random) {
                case 0..<5:
                    let due = now + UInt64.random(in: 0...30, using: &random)
                    let key = slots.add(due: due, value)
                    model.append((max(due, now + 1), value, key))
                case 5..<7 where !model.isEmpty:
                    let index = Int.random(in: 0..<model.count, using: &random)
                    do { let result = slots.remove(model[index].key); #expect(result) }
                    model.remove(at: index)
                default:
                    now += UInt64.random(in: 0...12, using: &random)
                    let expected = model.filter { $0.due <= now }.sorted { ($0.due, $0.value) < ($1.due, $1.value) }.map(\.value)
                    model.removeAll { $0.due <= now }
                    do { let result = slots.advance(to: now); #expect(result == expected) }
                }
                #expect(slots.count == model.count)
            }
        }
    }

    /// The first occupied tick is never after the earliest due timer, and never at or before the
    /// last tick collected.
    @Test func theFirstOccupiedTickIsALowerBoundOfWhatIsDue() {
        var slots = TimerSlots<Int>(slots: 8)
        #expect(slots.firstOccupiedTick() == nil)
        _ = slots.add(due: 20, 20)
        _ = slots.add(due: 3, 3)
        #expect(slots.firstOccupiedTick() == 3)
        do { let fired = slots.advance(to: 3); #expect(fired == [3]) }
        // 20 shares bucket 4 with tick 4: a wake-up there finds it belongs to a later round.
        #expect(slots.firstOccupiedTick() == 4)
        do { let fired = slots.advance(to: 4); #expect(fired == []) }
        #expect(slots.firstOccupiedTick() == 12)
        do { let fired = slots.advance(to: 20); #expect(fired == [20]) }
        #expect(slots.firstOccupiedTick() == nil)

        var random = SeededGenerator(seed: 0x5107)
        for _ in 0..<500 {
            var slots = TimerSlots<Int>(slots: Int.random(in: 1...16, using: &random), tick: UInt64.random(in: 0...100, using: &random))
            var dues: [UInt64] = []
            for _ in 0..<Int.random(in: 1...5, using: &random) {
                let due = slots.tick + UInt64.random(in: 1...60, using: &random)
                _ = slots.add(due: due, 0)
                dues.append(due)
            }
            let first = slots.firstOccupiedTick()
            #expect(first != nil && first! > slots.tick && first! <= dues.min()!)
        }
    }
}

