/// When a worker process whose lanes are not all idle claims again: pure, so every case is
/// tested without a database (``ClaimGateTests``).
///
/// Every transaction costs the same five or six round trips however many jobs it applies, so a
/// lane that takes one job at a time below saturation pays them per push: below saturation a
/// second lane costs the worker and PostgreSQL more CPU per push and raises the push p99, while
/// at saturation a second lane fed full groups adds throughput. So an idle worker claims at once, and a busy one opens another lane only for a backlog: once
/// `backlog` jobs were announced since its last claim, or once work has waited `patience` (a
/// lane finished, so its users' next jobs may be runnable, or a job was announced). Below that,
/// the busy lane takes the jobs when it finishes, in one transaction. `patience` bounds how long
/// a push can wait behind a large job in another lane.
struct ClaimGate: Sendable {
    /// Jobs announced since the last claim that open another lane at once.
    var backlog: Int
    /// The longest work waits for a busy lane before another lane claims it.
    var patience: Duration
    /// A worker claims at least this often, whatever it heard: scheduled retries announce nothing.
    var pollInterval: Duration

    enum Decision: Sendable, Equatable {
        case claim
        /// Wait for a lane to finish, a notification, or this long, then decide again.
        case wait(Duration)
    }

    /// - Parameters:
    ///   - busyLanes: lanes applying jobs now.
    ///   - freeLanes: lanes that could take jobs now.
    ///   - announced: jobs announced since the last claim began.
    ///   - waiting: how long since work first became possible after the last claim (a job
    ///     announced or a lane finished); `nil`: none since.
    ///   - sinceClaim: how long since the last claim began.
    func decide(busyLanes: Int, freeLanes: Int, announced: Int, waiting: Duration?, sinceClaim: Duration) -> Decision {
        guard freeLanes > 0 else { return .wait(pollInterval) }
        if busyLanes == 0 || sinceClaim >= pollInterval || announced >= backlog { return .claim }
        if let waiting {
            if waiting >= patience { return .claim }
            return .wait(min(patience - waiting, pollInterval - sinceClaim))
        }
        return .wait(pollInterval - sinceClaim)
    }
}
