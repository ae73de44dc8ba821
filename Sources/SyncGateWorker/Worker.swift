import CoreMetrics
import Metrics
package import Logging
import ServiceLifecycle
package import SyncGateCore
import SyncGateWire
package import SyncGateStorage
package import Tracing
package import SyncGateConcurrency

/// Claims jobs and applies them in up to `concurrency` lanes at a time.
///
/// One producer per process (River's design) claims, in one query, up to `batchLimit` runnable
/// jobs for each free lane (the claim hands out at most one job per user, oldest first) and
/// shares them among as few lanes as hold them (``share(_:lanes:batchLimit:)``); a lane applies
/// its jobs together, those that share no feed in one transaction
/// (``WorkerStore/apply(_:collections:now:)``). So a busy worker's transactions grow with its
/// backlog, and an idle one applies each push at once. An idle worker claims when a "jobs
/// available" notification arrives (however many arrive meanwhile: they coalesce into one
/// claim), when the backoff of a job it sent back for a retry ends, or every `pollInterval`; one
/// with a busy lane claims again when its lanes are all done,
/// for a backlog, or once work has waited `backlogPatience` (``ClaimGate``). One heartbeat per
/// process extends every lease in hand in one statement. Failures are recorded
/// with capped, jittered backoff until the attempts run out and the job is `dead`. A rescuer
/// returns jobs whose lease expired (their worker died) to the queue.
///
/// On graceful shutdown (SIGTERM) lanes stop claiming and finish the jobs in hand.
package final class Worker: Service {
    let store: any WorkerStore
    let collections: Collections
    let configuration: WorkerConfiguration
    let hooks: WorkerHooks
    let logger: Logger
    /// Each job's claim and apply are spans of the trace its push started (stored with the job).
    let tracer: any Tracer
    let metrics = WorkerMetrics()
    /// Opened by the process once it has migrated the schema (`serve`); without it the worker
    /// checks the schema itself (`syncgate worker`, whose database `syncgate migrate` prepares).
    let schemaReady: Latch?

    package init(
        store: any WorkerStore, collections: Collections, configuration: WorkerConfiguration, hooks: WorkerHooks = .init(),
        schemaReady: Latch? = nil, tracer: (any Tracer)? = nil, logger: Logger
    ) {
        self.schemaReady = schemaReady
        self.tracer = tracer ?? InstrumentationSystem.tracer
        self.store = store
        self.collections = collections
        self.configuration = configuration
        self.hooks = hooks
        var logger = logger
        logger[metadataKey: "syncgate.worker"] = "\(configuration.workerID)"
        self.logger = logger
    }

    package func run() async throws {
        let stop = StopSignal()
        try await withGracefulShutdownHandler {
            try await waitForSchema(stop: stop)
        } onGracefulShutdown: {
            stop.trigger()
        }
        guard !stop.isTriggered, !Task.isCancelled else { return }
        let subscription = store.notifier.subscribe(.init(jobsAvailable: true))
        let leases = LeasesInHand()
        logger.info("worker started", metadata: ["syncgate.concurrency": "\(configuration.concurrency)"])
        // The heartbeat outlives the stop: it keeps the leases of the jobs the lanes still finish.
        let drained = StopSignal()
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                group.addTask {
                    await self.runProducer(subscription: subscription, leases: leases, stop: stop)
                    drained.trigger()
                }
                group.addTask { await self.runHeartbeat(leases: leases, stop: drained) }
                group.addTask { await self.runRescuer(stop: stop) }
            }
        } onGracefulShutdown: {
            self.logger.info("worker stopping: no more claims, finishing the jobs in hand", metadata: ["syncgate.jobs_in_hand": "\(leases.all.count)"])
            stop.trigger()
            subscription.cancel()
        }
        logger.info("worker stopped")
    }

    /// Waits until migrations are applied (a worker may start before `syncgate migrate` ran).
    func waitForSchema(stop: StopSignal) async throws {
        if let schemaReady {
            // Its process migrates: nothing to check, nothing to warn about however long it takes.
            try? await cancelWhenGracefulShutdown { try await schemaReady.wait() }
            return
        }
        // Check soon, backing off to every 500 ms (a first check that came too early used to
        // leave the process's first pushes waiting half a second). Only a wait that lasts is
        // worth a warning.
        let started = ContinuousClock.now
        var checks = 0
        var warned = false
        while !stop.isTriggered, !Task.isCancelled {
            var problem = "the database schema is not migrated (run `syncgate migrate`)"
            do {
                let status = try await store.schemaStatus()
                if status.isServable { return }
                problem = status.problem ?? problem
            } catch {
                problem = "the database is unreachable: \(error)"
            }
            if !warned, started.duration(to: .now) >= .seconds(3) {
                logger.warning("waiting: \(problem)")
                warned = true
            }
            checks += 1
            await stop.sleep(for: Self.schemaRecheckDelay(afterChecks: checks))
        }
    }

    /// How long to wait before looking at the schema again after `checks` looks: 10 ms,
    /// doubling, at most 500 ms.
    static func schemaRecheckDelay(afterChecks checks: Int) -> Duration {
        .milliseconds(min(500, 10 << min(max(checks, 1) - 1, 6)))
    }

    /// Claims up to the free lanes' worth of jobs in one query when ``ClaimGate`` says so and
    /// applies them in lanes; on graceful shutdown stops claiming and waits for the lanes in hand.
    func runProducer(subscription: ChangeSubscription, leases: LeasesInHand, stop: StopSignal) async {
        // Lanes ring it when they finish; the notifications are forwarded to it.
        let doorbell = ChangeNotifier()
        let rung = doorbell.subscribe(.init(jobsAvailable: true))
        defer { rung.cancel() }
        // When the jobs this process sent back for a retry become runnable: nothing announces a
        // retry, so the producer wakes for each instead of leaving it to the next poll.
        let retriesDue = Locked<[ContinuousClock.Instant]>([])
        await withDiscardingTaskGroup { group in
            group.addTask {
                while let events = await subscription.next(timeout: .seconds(3600)) {
                    if events.contains(.jobsAvailable) { doorbell.publish(.jobsAvailable) }
                }
                rung.cancel()
            }
            let running = Locked(0)
            let gate = configuration.claimGate
            var lastClaim = (announced: store.notifier.jobsAnnounced, at: ContinuousClock.now)
            // Since when work has been possible that the last claim did not take; `nil`: none.
            var waitingSince: ContinuousClock.Instant?
            while !stop.isTriggered, !Task.isCancelled {
                let busy = running.value
                let free = configuration.concurrency - busy
                let now = ContinuousClock.now
                let announced = store.notifier.jobsAnnounced
                let decision = gate.decide(
                    busyLanes: busy, freeLanes: free, announced: announced - lastClaim.announced,
                    waiting: waitingSince.map { $0.duration(to: now) }, sinceClaim: lastClaim.at.duration(to: now)
                )
                var wait = configuration.pollInterval
                switch decision {
                case .wait(let duration):
                    wait = duration
                case .claim:
                    lastClaim = (announced, now)
                    waitingSince = nil
                    do {
                        let claimStarted = DefaultTracerClock.now
                        let claimed = try await store.claimJobs(
                            workerID: configuration.workerID, limit: free * configuration.batchLimit, leaseMilliseconds: configuration.leaseMilliseconds
                        )
                        let claim = ClaimTiming(started: claimStarted, ended: DefaultTracerClock.now, batch: claimed.count)
                        for batch in Self.share(claimed, lanes: free, batchLimit: configuration.batchLimit) {
                            running.update { $0 += 1 }
                            for job in batch { leases.insert(job.lease) }
                            group.addTask {
                                let retries = await self.process(batch, claim: claim)
                                let now = ContinuousClock.now
                                if !retries.isEmpty { retriesDue.update { $0 += retries.map { now + $0 + .milliseconds(1) } } }
                                for job in batch { leases.remove(job.lease) }
                                running.update { $0 -= 1 }
                                doorbell.publish(.jobsAvailable)
                            }
                        }
                    } catch {
                        logger.warning("claiming jobs failed", metadata: ["syncgate.error": "\(error)"])
                    }
                }
                // Decide again when a lane finishes (its user's next job may be runnable now), on
                // a notification (all that arrived meanwhile count once), or when the wait is up.
                // One that rang during the claim is still pending: no wake-up is lost.
                if let next = retriesDue.value.min() { wait = max(.zero, min(wait, ContinuousClock.now.duration(to: next))) }
                guard let events = await rung.next(timeout: wait) else { break }
                let retryDue = retriesDue.update { due in
                    let count = due.count
                    due.removeAll { $0 <= .now }
                    return due.count < count
                }
                if !events.isEmpty || retryDue, waitingSince == nil { waitingSince = .now }
            }
            subscription.cancel()
        }
    }

    /// A lane's group beyond which another free lane shares the work: every transaction costs
    /// five or six round trips however many operations it applies, a small part of a
    /// 200-operation group's time.
    static let operationsPerLane = 200

    /// Claimed jobs shared among up to `lanes` free lanes: as few lanes as hold them — at most
    /// `batchLimit` jobs and, where there are lanes for it, `operationsPerLane` operations each
    /// (a small push does not wait for a large one's transaction) — balanced by operations, each
    /// lane's jobs in claim order. No lane empty.
    static func share(_ jobs: [ClaimedJob<JobPayload>], lanes: Int, batchLimit: Int) -> [[ClaimedJob<JobPayload>]] {
        guard !jobs.isEmpty else { return [] }
        let operations = jobs.reduce(0) { $0 + $1.operations.count }
        let needed = max((jobs.count + batchLimit - 1) / batchLimit, (operations + operationsPerLane - 1) / operationsPerLane)
        let count = min(max(lanes, 1), jobs.count, needed)
        // Largest first, each to the lane with the fewest operations that has room (a greedy
        // balance: the heaviest job sets a transaction's length, so it goes first).
        var load = [(jobs: [Int], operations: Int)](repeating: ([], 0), count: count)
        let capacity = max(batchLimit, (jobs.count + count - 1) / count)
        let heaviestFirst = jobs.indices.sorted { (jobs[$0].operations.count, $1) > (jobs[$1].operations.count, $0) }
        for index in heaviestFirst {
            let lane = load.indices.filter { load[$0].jobs.count < capacity }.min { load[$0].operations < load[$1].operations }!
            load[lane].jobs.append(index)
            load[lane].operations += jobs[index].operations.count
        }
        return load.map { $0.jobs.sorted().map { jobs[$0] } }
    }

    /// One statement per interval extends every lease this process holds, until `stop` (the
    /// lanes drained: a graceful shutdown stops the claims, not the jobs in hand).
    func runHeartbeat(leases: LeasesInHand, stop: StopSignal) async {
        while !stop.isTriggered, !Task.isCancelled {
            await stop.sleep(for: configuration.heartbeatInterval)
            let held = leases.all
            guard !held.isEmpty, !stop.isTriggered else { continue }
            do {
                try await store.extendLeases(held, leaseMilliseconds: configuration.leaseMilliseconds)
            } catch {
                logger.warning("extending leases failed; retrying next interval", metadata: ["syncgate.error": "\(error)"])
            }
        }
    }

    /// When the claim that handed out a job ran: each of its jobs gets a `claim` span.
    struct ClaimTiming: Sendable {
        var started: DefaultTracerClock.Instant
        var ended: DefaultTracerClock.Instant
        var batch: Int
    }

    /// Applies a lane's jobs while the heartbeat keeps their leases; records each failure for
    /// retry. Each job's claim and apply are spans of its push's trace. Returns the backoffs of
    /// the jobs it sent back to the queue: how long until each is runnable again.
    @discardableResult
    func process(_ batch: [ClaimedJob<JobPayload>], claim: ClaimTiming? = nil) async -> [Duration] {
        var retries: [Duration] = []
        func failed(_ job: ClaimedJob<JobPayload>, error: any Error, span: any Span) async {
            if let delay = await self.failed(job, error: error, span: span) { retries.append(delay) }
        }
        var spans: [Int64: any Span] = [:]
        for job in batch {
            let parent = tracer.context(from: job.payload.traceContext)
            if let claim {
                let span = tracer.startSpan("claim", context: parent, ofKind: .consumer, at: claim.started)
                span.attributes["syncgate.job"] = job.id
                span.attributes["syncgate.claimed_together"] = claim.batch
                span.end(at: claim.ended)
            }
            let span = tracer.startSpan("apply", context: parent, ofKind: .consumer)
            span.attributes["syncgate.job"] = job.id
            span.attributes["syncgate.attempt"] = job.attempts
            span.attributes["syncgate.operations"] = job.operations.count
            span.attributes["syncgate.lane_jobs"] = batch.count
            spans[job.id] = span
        }
        defer { for span in spans.values { span.end() } }

        // The hooks of a lane's jobs run side by side: a test may hold one of them.
        let hookFailures = await withTaskGroup(of: (Int64, (any Error)?).self) { group in
            guard let beforeApply = hooks.beforeApply else { return [Int64: any Error]() }
            for job in batch {
                group.addTask {
                    do {
                        try await beforeApply(job)
                        return (job.id, nil)
                    } catch {
                        return (job.id, error)
                    }
                }
            }
            var failures: [Int64: any Error] = [:]
            for await (id, error) in group { if let error { failures[id] = error } }
            return failures
        }
        for job in batch {
            if let error = hookFailures[job.id], let span = spans[job.id] { await failed(job, error: error, span: span) }
        }
        let ready = batch.filter { hookFailures[$0.id] == nil }
        guard !ready.isEmpty else { return retries }
        let started = ContinuousClock.now
        let outcomes = await store.apply(
            ready.map { (job: $0, context: spans[$0.id]?.context ?? .topLevel) }, collections: collections, now: Timestamp.now()
        )
        let duration = started.duration(to: .now)
        for (job, outcome) in zip(ready, outcomes) {
            guard let span = spans[job.id] else { continue }
            switch outcome {
            case .success(let outcome): applied(job, outcome: outcome, duration: duration, span: span)
            case .failure(let error): await failed(job, error: error, span: span)
            }
        }
        return retries
    }

    private func applied(_ job: ClaimedJob<JobPayload>, outcome: ApplyOutcome, duration: Duration, span: any Span) {
        var logger = logger
        logger[metadataKey: "syncgate.job"] = "\(job.id)"
        switch outcome {
        case .done(let results, let roundTrips):
            metrics.attempt(.done)
            metrics.applyDuration.record(duration: duration)
            metrics.pushToApply.recordMilliseconds(max(0, Timestamp.now().millisecondsSinceEpoch - job.createdAt.millisecondsSinceEpoch))
            metrics.operations(results, collections: collections)
            logger.debug("job applied", metadata: [
                "syncgate.operations": "\(results.count)", "syncgate.round_trips": "\(roundTrips)", "syncgate.duration": "\(duration)",
            ])
        case .leaseLost:
            metrics.attempt(.leaseLost)
            span.attributes["syncgate.lease_lost"] = true
            logger.warning("lease lost before the job committed; another worker owns it now")
        }
    }

    /// Settles a failed attempt; the backoff when the job went back to the queue.
    private func failed(_ job: ClaimedJob<JobPayload>, error: any Error, span: any Span) async -> Duration? {
        var logger = logger
        logger[metadataKey: "syncgate.job"] = "\(job.id)"
        span.recordError(error)
        // A failure retrying cannot fix (a stored row that does not decode) kills the job at once.
        let permanent = error.isPermanentFailure
        let settlement = configuration.retryPolicy.allowing(job.maximumAttempts).settle(
            operations: job.operations, afterAttempts: job.attempts, permanent: permanent, jitter: Double.random(in: 0..<1)
        )
        logger.log(level: permanent ? .error : .warning, "job attempt failed", metadata: [
            "syncgate.attempt": "\(job.attempts)", "syncgate.settlement": "\(settlement.summary)", "syncgate.error": "\(error)",
        ])
        if case .dead = settlement { metrics.attempt(.dead) } else { metrics.attempt(.retry) }
        do {
            guard try await store.fail(job, error: String(describing: error), settlement: settlement) else { return nil }
        } catch {
            // The lease will expire and the rescuer will count the attempt instead.
            logger.error("recording the failure failed", metadata: ["syncgate.error": "\(error)"])
            return nil
        }
        if case .retry(let delay) = settlement { return .milliseconds(delay) }
        return nil
    }

    func runRescuer(stop: StopSignal) async {
        while !stop.isTriggered, !Task.isCancelled {
            do {
                let report = try await store.rescueExpiredLeases(policy: configuration.retryPolicy, jitter: { Double.random(in: 0..<1) })
                if report.requeued + report.dead > 0 {
                    logger.warning("rescued jobs whose worker stopped", metadata: [
                        "syncgate.requeued": "\(report.requeued)", "syncgate.dead": "\(report.dead)",
                    ])
                }
            } catch {
                logger.debug("rescue failed", metadata: ["syncgate.error": "\(error)"])
            }
            await stop.sleep(for: configuration.rescueInterval)
        }
    }
}

extension JobSettlement {
    /// For logs: the settlement without its results.
    var summary: String {
        switch self {
        case .retry(let delay): "retry in \(delay) ms"
        case .dead: "dead"
        }
    }
}

/// The leases a worker process holds now, for its one heartbeat.
final class LeasesInHand: Sendable {
    private let leases = Locked<[Int64: JobLease]>([:])

    func insert(_ lease: JobLease) { leases.update { $0[lease.id] = lease } }
    /// Only this lease: a job rescued and claimed again by this process holds a new token, which
    /// the first claim's lane, ending `leaseLost`, must not take from the heartbeat.
    func remove(_ lease: JobLease) { leases.update { if $0[lease.id] == lease { $0[lease.id] = nil } } }
    var all: [JobLease] { leases.value.values.sorted { $0.id < $1.id } }
}

/// A one-way flag that also ends sleeps early; any number of tasks may sleep on it at once.
final class StopSignal: Sendable {
    private let notifier = ChangeNotifier()

    var isTriggered: Bool { notifier.isClosed }

    func trigger() { notifier.close() }

    func sleep(for duration: Duration) async {
        // A subscription per sleeper: one subscription holds one waiter.
        let subscription = notifier.subscribe(.init())
        defer { subscription.cancel() }
        _ = await subscription.next(timeout: duration)
    }
}
