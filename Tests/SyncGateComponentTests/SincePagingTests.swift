import Testing

import SyncGateDialects
import SyncGateWire

/// Where a page read by time ends: never inside a run of equal times, whatever the run's length.
@Suite(.timeLimit(.minutes(10))) struct SincePagingTests {
    @Test func everyRowFitting() {
        #expect(SincePaging.cut(times: [], limit: 3) == .complete)
        #expect(SincePaging.cut(times: [1, 2, 3], limit: 3) == .complete)
        #expect(SincePaging.cut(times: [5, 5, 5], limit: 3) == .complete)
    }

    @Test func endsAfterTheLastRowBeforeTheFirstThatDoesNotFit() {
        #expect(SincePaging.cut(times: [1, 2, 3, 4], limit: 3) == .through(count: 3, time: 3))
        // The row that does not fit shares its time with the page's last rows: they wait too.
        #expect(SincePaging.cut(times: [1, 2, 4, 4], limit: 3) == .through(count: 2, time: 2))
        #expect(SincePaging.cut(times: [1, 4, 4, 4], limit: 3) == .through(count: 1, time: 1))
    }

    @Test func aRunLongerThanAPageIsReadWhole() {
        #expect(SincePaging.cut(times: [7, 7], limit: 1) == .sameTime(7))
        #expect(SincePaging.cut(times: [7, 7, 7, 7], limit: 3) == .sameTime(7))
    }

    /// Every cut, over every ascending list of small times: the page is a prefix, it ends
    /// between two different times, and nothing at or below the next `since` is left behind.
    @Test func exhaustivelyNoRowAtOrBelowTheNextSinceIsLeftOut() {
        func lists(_ length: Int, from: Int64) -> [[Int64]] {
            guard length > 0 else { return [[]] }
            return (from...3).flatMap { first in lists(length - 1, from: first).map { [first] + $0 } }
        }
        var checked = 0
        for limit in 1...4 {
            for count in 0...(limit + 1) {
                for times in lists(count, from: 0) {
                    switch SincePaging.cut(times: times, limit: limit) {
                    case .complete:
                        #expect(times.count <= limit)
                    case .through(let taken, let time):
                        #expect(times.count == limit + 1 && (1...limit).contains(taken))
                        #expect(times[taken - 1] == time && times[taken] > time, "\(times) limit \(limit)")
                    case .sameTime(let time):
                        #expect(times.allSatisfy { $0 == time }, "\(times) limit \(limit)")
                    }
                    checked += 1
                }
            }
        }
        #expect(checked > 100)
    }
}
