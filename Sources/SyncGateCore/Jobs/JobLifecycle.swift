/// The states of a push job (see docs/job-states.md):
///
/// ```
/// queued ──claim──▶ running ──commit──▶ done
///   ▲                 │  │
///   │        failure  │  └─ lease expired ─┐
///   │                 ▼                    ▼
///   └──── run_at ── retrying ◀─────────────┘   (attempts left)
///                     │
///                     └── attempts exhausted ──▶ dead
/// ```
public enum JobState: String, Sendable, CaseIterable {
    case queued, running, retrying, done, dead

    /// `done` and `dead` are final: the job answers with results.
    public var isFinished: Bool { self == .done || self == .dead }
}

/// Capped exponential backoff with jitter, and the attempt budget.
public struct RetryPolicy: Sendable, Hashable {
    public var maximumAttempts: Int
    public var baseDelayMilliseconds: Int64
    public var maximumDelayMilliseconds: Int64

    public init(maximumAttempts: Int = 5, baseDelayMilliseconds: Int64 = 1000, maximumDelayMilliseconds: Int64 = 60_000) {
        self.maximumAttempts = maximumAttempts
        self.baseDelayMilliseconds = baseDelayMilliseconds
        self.maximumDelayMilliseconds = maximumDelayMilliseconds
    }

    /// What follows a failed attempt.
    public enum Next: Sendable, Hashable {
        case retry(afterMilliseconds: Int64)
        case dead
    }

    /// - Parameters:
    ///   - attempts: attempts made so far, including the one that failed.
    ///   - jitter: a number in `0..<1`; half the delay is fixed and half scales with it, so
    ///     retries of many jobs that failed together spread out.
    public func next(afterAttempts attempts: Int, jitter: Double) -> Next {
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
    public static func deadJob(_ operations: [SyncOperation], attempts: Int) -> [OperationResult] {
        operations.map {
            .rejected(
                $0,
                code: ErrorCode.internal.rawValue,
                message: "the job failed after \(attempts) attempts and none of its operations took effect; push them again",
                retryable: true
            )
        }
    }
}

/// A job's operations as stored in its payload column.
public enum JobPayload {
    public static func encode(_ operations: [SyncOperation]) -> String {
        JSONValue.array(operations.map(\.json)).serialized()
    }

    public static func decode(_ text: String) throws(ProtocolError) -> [SyncOperation] {
        let document: JSONValue
        do {
            document = try JSONParser(maximumDepth: 1024).parse(text)
        } catch {
            throw ProtocolError(.internal, "stored job payload is not JSON: \(error)")
        }
        guard let operations = document.arrayValue else { throw ProtocolError(.internal, "stored job payload is not an array") }
        var decoded: [SyncOperation] = []
        for (index, value) in operations.enumerated() {
            // Stored payloads were validated on the way in; the timestamp is always present.
            decoded.append(try PushRequest.parseOperation(value, index: index, limits: .unlimited, receivedAt: Timestamp(millisecondsSinceEpoch: 0)))
        }
        return decoded
    }

    public static func encodeResults(_ results: [OperationResult]) -> String {
        JSONValue.array(results.map(\.json)).serialized()
    }

    public static func decodeResults(_ text: String) -> [OperationResult] {
        guard let array = (try? JSONParser(maximumDepth: 1024).parse(text))?.arrayValue else { return [] }
        return array.compactMap(OperationResult.init(json:))
    }
}

extension PushLimits {
    /// For re-reading stored payloads, which passed the configured limits when they were pushed.
    static let unlimited = PushLimits(maximumOperations: .max, maximumDataBytes: .max, maximumDataDepth: 1000)
}
