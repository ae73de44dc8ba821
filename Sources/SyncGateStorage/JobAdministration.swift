package import SyncGateWire
import SyncGateCore

/// A job as an operator sees it (`syncgate admin job show`, `GET /admin/v1/jobs/{id}`): the
/// record, its payload as stored, its lease and its timings.
package struct JobDetail: Sendable, Hashable {
    package var record: JobRecord
    /// The operations and trace context as stored (``JobPayload/init(stored:)``).
    package var payload: String
    /// When it may be claimed (a retrying job's backoff).
    package var runAt: Timestamp
    package var updatedAt: Timestamp
    /// The worker holding it, while it runs.
    package var leaseOwner: String?
    package var leaseExpiresAt: Timestamp?
    /// Its failed attempts as stored (`[{"at": ms, "attempt", "error"}]`, the last 20); `nil`: none.
    package var errors: String?

    package init(record: JobRecord, payload: String, runAt: Timestamp, updatedAt: Timestamp) {
        self.record = record
        self.payload = payload
        self.runAt = runAt
        self.updatedAt = updatedAt
    }
}

/// An operator's action on one job (the admin API, the console and `syncgate admin job`).
package enum JobAction: String, Sendable, CaseIterable {
    case retry, cancel, delete

    /// Whether it takes a job in `state`.
    package func applies(to state: JobState) -> Bool {
        switch self {
        case .retry: state == .dead
        case .cancel: state == .queued || state == .retrying
        case .delete: state.isFinished
        }
    }

    /// The states it takes, as an operator whose job is in another is told.
    package var rule: String {
        switch self {
        case .retry: "only a dead job can be retried"
        case .cancel: "only a queued or retrying job can be cancelled (a running one ends its attempt)"
        case .delete: "only a finished (done or dead) job can be deleted"
        }
    }

    /// What it did, after the job's id: "job 7 cancelled".
    package var done: String {
        switch self {
        case .retry: "queued again"
        case .cancel: "cancelled"
        case .delete: "deleted"
        }
    }
}

/// What an operator's action on one job did.
package enum JobActionOutcome: Sendable, Hashable {
    case applied
    case notFound
    /// The job is in a state the action does not apply to.
    case refused(JobState)
    /// A dead job whose user has later jobs unfinished: retried now, it would run beside them.
    case waitsForLaterJobs
    /// A waiting job whose device has earlier jobs unfinished: cancelled now, it would finish
    /// before them, and the device's watermark would count jobs that have not finished.
    case waitsForEarlierJobs
}

extension JobActionOutcome {
    /// Why a retry of a dead job waits, as an operator is told it.
    package static let laterJobsRule = "the user's later jobs are not all finished (retried now, it would run beside them): retry it once they are"
    /// Why a cancel of a waiting job waits.
    package static let earlierJobsRule = "the device's earlier jobs are not all finished (its jobs finish in push order): cancel those first"
}

extension JobRecord {
    /// A job in a list, as the admin API and `syncgate admin jobs --json` show it.
    package var summaryJSON: JSONValue {
        [
            "id": .int(id), "user_id": .string(userID), "device_id": .string(deviceID), "state": .string(state.rawValue),
            "attempts": .int(Int64(attempts)), "max_attempts": .int(Int64(maximumAttempts)), "operations": .int(Int64(operationCount)),
            "created_at": .string(createdAt.rfc3339), "finished_at": finishedAt.map { .string($0.rfc3339) } ?? .null,
            "last_error": lastError.map(JSONValue.string) ?? .null,
        ]
    }
}

extension JobDetail {
    /// Operations a job's page lists at most (a push holds up to 1,000).
    package static let listedOperations = 100

    /// A job as the admin API and `syncgate admin job show --json` show it: the summary, lease and
    /// timings, the operations without their documents (a document's size instead), and the
    /// results once finished. A payload or results that do not decode are shown as such.
    package var json: JSONValue {
        guard case .object(var object) = record.summaryJSON else { return record.summaryJSON }
        object["run_at"] = .string(runAt.rfc3339)
        object["updated_at"] = .string(updatedAt.rfc3339)
        object["lease"] = leaseOwner.map { owner in
            ["owner": .string(owner), "expires_at": leaseExpiresAt.map { .string($0.rfc3339) } ?? .null]
        } ?? .null
        do {
            let operations = try JobPayload(stored: payload).operations
            object["operation_list"] = .array(operations.prefix(Self.listedOperations).map { operation in
                [
                    "idempotency_key": .string(operation.idempotencyKey), "entity_type": .string(operation.entityType),
                    "entity_id": .string(operation.entityID), "intent": .string(operation.intent.rawValue),
                    "base_version": .int(operation.baseVersion), "household_id": operation.householdID.map(JSONValue.string) ?? .null,
                    "data_bytes": operation.data.map { .int(Int64(JSONValue.object($0).serializedBytes().count)) } ?? .null,
                ]
            })
        } catch {
            object["payload_error"] = .string(error.message)
        }
        // Times as RFC 3339; stored errors that do not parse are shown as they are.
        let attempts = errors.flatMap { try? JSONParser().parse(Array($0.utf8)) }?.arrayValue ?? []
        object["errors"] = .array(attempts.map { attempt in
            guard case .object(var entry) = attempt, let at = entry["at"]?.intValue else { return attempt }
            entry["at"] = .string(Timestamp(millisecondsSinceEpoch: at).rfc3339)
            return .object(entry)
        })
        do {
            object["results"] = try record.decodedResults().map { .array($0.map(\.json)) } ?? .null
        } catch {
            object["results_error"] = .string(error.message)
        }
        return .object(object)
    }
}
