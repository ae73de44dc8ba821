@testable import SyncGateWorker
import SyncGateStorage
import Testing

/// When a worker with busy lanes claims again: at once for a backlog, otherwise when its busy
/// lanes finish or work has waited its patience, and never later than the poll interval.
@Suite struct ClaimGateTests {
    /// A lane whose job was rescued and claimed again (new token) by this process removes only
    /// its own lease: the heartbeat keeps extending the new claim's.
    @Test func aLeaseIsRemovedOnlyByItsOwnToken() {
        let leases = LeasesInHand()
        leases.insert(JobLease(id: 1, token: "first"))
        leases.insert(JobLease(id: 1, token: "second"))
        leases.remove(JobLease(id: 1, token: "first"))
        #expect(leases.all == [JobLease(id: 1, token: "second")])
        leases.remove(JobLease(id: 1, token: "second"))
        #expect(leases.all.isEmpty)
    }

    static let gate = ClaimGate(backlog: 8, patience: .milliseconds(10), pollInterval: .seconds(1))

    static let lanes = [0, 1, 2, 4]
    static let announcements = [0, 1, 7, 8, 50]
    static let waits: [Duration?] = [nil, .zero, .milliseconds(3), .milliseconds(10), .milliseconds(400)]
    static let sinceClaims: [Duration] = [.zero, .milliseconds(5), .milliseconds(999), .seconds(1), .seconds(7)]

    struct Case {
        var busy: Int
        var free: Int
        var announced: Int
        var waiting: Duration?
        var sinceClaim: Duration
        var decision: ClaimGate.Decision
    }

    /// Every combination of the inputs above, with the decision.
    static var everyCase: [Case] {
        var cases: [Case] = []
        for busy in lanes {
            for free in lanes {
                for announced in announcements {
                    for waiting in waits {
                        for sinceClaim in sinceClaims {
                            let decision = gate.decide(busyLanes: busy, freeLanes: free, announced: announced, waiting: waiting, sinceClaim: sinceClaim)
                            cases.append(Case(busy: busy, free: free, announced: announced, waiting: waiting, sinceClaim: sinceClaim, decision: decision))
                        }
                    }
                }
            }
        }
        return cases
    }

    @Test func aWorkerWithNoFreeLaneNeverClaims() {
        for c in Self.everyCase where c.free == 0 {
            #expect(c.decision == .wait(.seconds(1)), "\(c)")
        }
    }

    /// An idle worker takes whatever is runnable at once: a push to an idle system waits for nobody.
    @Test func anIdleWorkerClaimsAtOnce() {
        for c in Self.everyCase where c.busy == 0 && c.free > 0 {
            #expect(c.decision == .claim, "\(c)")
        }
    }

    /// A busy worker opens another lane for a backlog, for work that waited its patience, or
    /// when its poll is due; otherwise it leaves the jobs to the lane that finishes first.
    @Test func aBusyWorkerClaimsOnlyForABacklogOrWorkThatWaitedItsPatience() {
        for c in Self.everyCase where c.busy > 0 && c.free > 0 {
            let backlog = c.announced >= 8
            let waitedEnough = c.waiting.map { $0 >= .milliseconds(10) } ?? false
            let pollDue = c.sinceClaim >= .seconds(1)
            if backlog || waitedEnough || pollDue {
                #expect(c.decision == .claim, "\(c)")
            } else {
                #expect(c.decision != .claim, "\(c)")
            }
        }
    }

    /// A wait ends when the patience or the poll interval runs out, whichever comes first, so the
    /// next decision comes no later than either.
    @Test func aWaitEndsWhenThePatienceOrThePollRunsOut() {
        for c in Self.everyCase where c.free > 0 {
            guard case .wait(let duration) = c.decision else { continue }
            #expect(duration > .zero, "\(c)")
            #expect(duration <= .seconds(1) - c.sinceClaim, "\(c)")
            if let waiting = c.waiting { #expect(duration <= .milliseconds(10) - waiting, "\(c)") }
        }
        let gate = Self.gate
        #expect(gate.decide(busyLanes: 1, freeLanes: 3, announced: 1, waiting: .milliseconds(3), sinceClaim: .milliseconds(5)) == .wait(.milliseconds(7)))
        #expect(gate.decide(busyLanes: 1, freeLanes: 3, announced: 1, waiting: .milliseconds(3), sinceClaim: .milliseconds(995)) == .wait(.milliseconds(5)))
        #expect(gate.decide(busyLanes: 1, freeLanes: 3, announced: 0, waiting: nil, sinceClaim: .milliseconds(300)) == .wait(.milliseconds(700)))
    }
}
