package import SyncGateWire
/// Capped exponential backoff with jitter, and the attempt budget.
package struct RetryPolicy: Sendable, Hashable {
    package var maximumAttempts: Int
    package var baseDelayMilliseconds: Int64
    package var maximumDelayMilliseconds: Int64

    package init(maximumAttempts: Int = 5, baseDelayMilliseconds: Int64 = 1000, maximumDelayMilliseconds: Int64 = 60_000) {
        self.maximumAttempts = maximumAttempts
        self.baseDelayMilliseconds = baseDelayMilliseconds
        self.maximumDelayMilliseconds = maximumDelayMilliseconds
    }

    /// What follows a failed attempt.
    package enum Next: Sendable, Hashable {
        case retry(afterMilliseconds: Int64)
        case dead
    }

    /// This policy with a job's own budget: the one its front gave it when it was queued (and
    /// the admin API shows), whatever this process was configured with.
    package func allowing(_ attempts: Int) -> RetryPolicy {
        var policy = self
        policy.maximumAttempts = attempts
        return policy
    }

    /// - Parameters:
    ///   - attempts: attempts made so far, including the one that failed.
    ///   - jitter: a number in `0..<1`; half the delay is fixed and half scales with it, so
    ///     retries of many jobs that failed together spread out.
    package func next(afterAttempts attempts: Int, jitter: Double) -> Next {
        guard attempts < maximumAttempts else { return .dead }
        let exponent = min(max(attempts - 1, 0), 40)
        let (scaled, overflow) = baseDelayMilliseconds.multipliedReportingOverflow(by: Int64(1) << exponent)
        let ceiling = overflow ? maximumDelayMilliseconds : min(scaled, maximumDelayMilliseconds)
        let clampedJitter = min(max(jitter, 0), 1)
        return .retry(afterMilliseconds: ceiling / 2 + Int64(Double(ceiling - ceiling / 2) * clampedJitter))
    }
}

extension OperationResult {
    /// The answer every operation of a dead job gets: none of them took effect, and pushing them
    /// again with the same idempotency keys is safe.
    package static func deadJob(_ operations: [SyncOperation], attempts: Int) -> [OperationResult] {
        operations.map {
            .rejected(
                $0,
                code: ErrorCode.internal.rawValue,
                message: "the job failed after \(attempts) attempts and none of its operations took effect; push them again",
                retryable: true
            )
        }
    }

    /// The answer every operation of a job an operator cancelled before it ran gets: as a dead
    /// job's, none took effect and pushing them again is safe.
    package static func cancelledJob(_ operations: [SyncOperation]) -> [OperationResult] {
        operations.map {
            .rejected(
                $0,
                code: ErrorCode.internal.rawValue,
                message: "an operator cancelled the job before it ran and none of its operations took effect; push them again",
                retryable: true
            )
        }
    }
}

/// What becomes of a job whose attempt failed (the worker's failure, or a lease that expired).
package enum JobSettlement: Sendable, Hashable {
    /// Back to `retrying`, claimable again after the delay.
    case retry(afterMilliseconds: Int64)
    /// Finished as `dead`, answering these results.
    case dead(results: [OperationResult])
}

extension RetryPolicy {
    /// Settles a failed attempt of a job holding `operations`.
    ///
    /// - Parameter permanent: the failure cannot go away by retrying (a stored document or payload
    ///   that does not decode): the job is dead at once.
    package func settle(operations: [SyncOperation], afterAttempts attempts: Int, permanent: Bool = false, jitter: Double) -> JobSettlement {
        switch permanent ? .dead : next(afterAttempts: attempts, jitter: jitter) {
        case .retry(let delay): return .retry(afterMilliseconds: delay)
        case .dead: return .dead(results: OperationResult.deadJob(operations, attempts: attempts))
        }
    }
}

/// A failure that retrying cannot fix (a stored payload or document that does not decode): the
/// job it hits goes `dead` at once instead of using up its attempts.
package protocol PermanentFailure: Error {}

/// An error that knows whether retrying can fix it (e.g. a database error by its class: a data
/// exception cannot be fixed by waiting, a lost connection can).
package protocol ClassifiedFailure: Error {
    var isPermanent: Bool { get }
    /// What a client may be told of it: the database's code and reason, no internal operation.
    var clientReason: String { get }
}

extension Error {
    /// Retrying the job cannot fix this failure: it goes `dead` at once instead of holding its
    /// user's queue through every retry.
    package var isPermanentFailure: Bool {
        self is any PermanentFailure || isDataRefusal
    }

    /// The database refused a value it was given (as opposed to a stored row SyncGate cannot
    /// read, or the database being away): the operation that wrote it can be found and refused.
    package var isDataRefusal: Bool {
        (self as? any ClassifiedFailure)?.isPermanent == true
    }
}

extension JobPayloadError: PermanentFailure {}
