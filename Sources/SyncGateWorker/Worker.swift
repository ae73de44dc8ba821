public import Logging
public import ServiceLifecycle
public import SyncGateCore
public import SyncGateStorage

/// Claims jobs and applies them, one lane per unit of concurrency.
///
/// Each lane claims one job at a time (the claim hands out at most one job per user, oldest
/// first), keeps its lease alive with a heartbeat while applying, and records failures with
/// capped, jittered backoff until the attempts run out and the job is `dead`. A rescuer returns
/// jobs whose lease expired (their worker died) to the queue.
///
/// On graceful shutdown (SIGTERM) lanes stop claiming and finish the jobs in hand.
public final class Worker: Service {
    let store: any WorkerStore
    let collections: Collections
    let configuration: WorkerConfiguration
    let hooks: WorkerHooks
    let logger: Logger

    public init(store: any WorkerStore, collections: Collections, configuration: WorkerConfiguration, hooks: WorkerHooks = .init(), logger: Logger) {
        self.store = store
        self.collections = collections
        self.configuration = configuration
        self.hooks = hooks
        var logger = logger
        logger[metadataKey: "syncgate.worker"] = "\(configuration.workerID)"
        self.logger = logger
    }

    public func run() async throws {
        let stop = StopSignal()
        try await withGracefulShutdownHandler {
            try await waitForSchema(stop: stop)
        } onGracefulShutdown: {
            stop.trigger()
        }
        guard !stop.isTriggered else { return }
        let subscriptions = (0..<configuration.concurrency).map { _ in
            store.notifier.subscribe(.init(jobsAvailable: true))
        }
        logger.info("worker started", metadata: ["syncgate.concurrency": "\(configuration.concurrency)"])
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for (lane, subscription) in subscriptions.enumerated() {
                    group.addTask { await self.runLane(lane, subscription: subscription, stop: stop) }
                }
                group.addTask { await self.runRescuer(stop: stop) }
            }
        } onGracefulShutdown: {
            stop.trigger()
            subscriptions.forEach { $0.cancel() }
        }
        logger.info("worker stopped")
    }

    /// Waits until migrations are applied (a worker may start before `syncgate migrate` ran).
    func waitForSchema(stop: StopSignal) async throws {
        // `serve` migrates while its workers start: only a wait that lasts is worth a warning.
        var checks = 0
        while !stop.isTriggered {
            var problem = "the database schema is not migrated (run `syncgate migrate`)"
            do {
                if try await store.schemaStatus().isCurrent { return }
            } catch {
                problem = "the database is unreachable: \(error)"
            }
            checks += 1
            if checks == 6 { logger.warning("waiting: \(problem)") }
            await stop.sleep(for: .milliseconds(500))
        }
    }

    func runLane(_ lane: Int, subscription: ChangeSubscription, stop: StopSignal) async {
        while !stop.isTriggered, !Task.isCancelled {
            let claimed: [ClaimedJob]
            do {
                claimed = try await store.claimJobs(workerID: configuration.workerID, limit: 1, leaseMilliseconds: configuration.leaseMilliseconds)
            } catch {
                logger.warning("claiming jobs failed", metadata: ["syncgate.error": "\(error)"])
                _ = await subscription.next(timeout: configuration.pollInterval)
                continue
            }
            guard let job = claimed.first else {
                // Idle: wake on a "jobs available" notification, or poll.
                _ = await subscription.next(timeout: configuration.pollInterval)
                continue
            }
            await process(job)
        }
    }

    /// Applies one job while a heartbeat keeps its lease; records a failure for retry.
    func process(_ job: ClaimedJob) async {
        var logger = logger
        logger[metadataKey: "syncgate.job"] = "\(job.id)"
        let started = ContinuousClock.now
        let info = ClaimedJobInfo(id: job.id, userID: job.userID, attempts: job.attempts)
        do {
            let outcome = try await withThrowingTaskGroup(of: ApplyOutcome?.self) { group in
                group.addTask {
                    while true {
                        try await Task.sleep(for: self.configuration.heartbeatInterval)
                        try? await self.store.extendLeases([job.lease], leaseMilliseconds: self.configuration.leaseMilliseconds)
                    }
                }
                group.addTask {
                    try await self.hooks.beforeApply(info)
                    return try await self.store.apply(job, collections: self.collections, now: Timestamp.now())
                }
                defer { group.cancelAll() }
                while let result = try await group.next() {
                    if let outcome = result { return outcome }
                }
                return ApplyOutcome.leaseLost
            }
            switch outcome {
            case .done(let results, let statements):
                logger.debug("job applied", metadata: [
                    "syncgate.operations": "\(results.count)", "syncgate.statements": "\(statements)",
                    "syncgate.duration": "\(started.duration(to: .now))",
                ])
            case .leaseLost:
                logger.warning("lease lost before the job committed; another worker owns it now")
            }
        } catch {
            // A failure retrying cannot fix (a stored row that does not decode) kills the job at once.
            let permanent = error is any PermanentFailure
            let settlement = configuration.retryPolicy.settle(
                operations: job.operations, afterAttempts: job.attempts, permanent: permanent, jitter: Double.random(in: 0..<1)
            )
            logger.log(level: permanent ? .error : .warning, "job attempt failed", metadata: [
                "syncgate.attempt": "\(job.attempts)", "syncgate.settlement": "\(settlement.summary)", "syncgate.error": "\(error)",
            ])
            do {
                try await store.fail(job, error: String(describing: error), settlement: settlement)
            } catch {
                // The lease will expire and the rescuer will count the attempt instead.
                logger.error("recording the failure failed", metadata: ["syncgate.error": "\(error)"])
            }
        }
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

/// A one-way flag that also ends sleeps early.
final class StopSignal: Sendable {
    private let notifier = ChangeNotifier()
    private let subscription: ChangeSubscription

    init() {
        subscription = notifier.subscribe(.init())
    }

    var isTriggered: Bool { subscription.isFinished }

    func trigger() { subscription.cancel() }

    func sleep(for duration: Duration) async {
        _ = await subscription.next(timeout: duration)
    }
}
