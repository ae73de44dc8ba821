import CoreMetrics
import Metrics
import SyncGateCore
import SyncGateStorage

/// The worker's series (see ``MetricName``), through swift-metrics: exported by whatever backend
/// the process bootstrapped (Prometheus in `syncgate`), free no-ops otherwise.
struct WorkerMetrics: Sendable {
    enum Outcome: String {
        case done, retry, dead
        case leaseLost = "lease_lost"
    }

    let applyDuration = Metrics.Timer(label: MetricName.applyDuration)
    let pushToApply = Metrics.Timer(label: MetricName.pushToApply)

    func attempt(_ outcome: Outcome) {
        Counter(label: MetricName.jobAttempts, dimensions: [("outcome", outcome.rawValue)]).increment()
    }

    /// Counts a finished job's operations by entity type and result.
    func operations(_ results: [OperationResult]) {
        var counts: [WorkerMetrics.OperationKey: Int] = [:]
        for result in results { counts[OperationKey(entityType: result.entityType, result: result.status.metricLabel), default: 0] += 1 }
        for (key, count) in counts {
            Counter(label: MetricName.operations, dimensions: [("entity_type", key.entityType), ("result", key.result)]).increment(by: count)
        }
    }

    struct OperationKey: Hashable {
        var entityType: String
        var result: String
    }
}

extension OperationResult.Status {
    /// A bounded label: the status, the conflict's resolution, or `rejected`.
    var metricLabel: String {
        switch self {
        case .applied: "applied"
        case .duplicate: "duplicate"
        case .conflict(let resolution): resolution.rawValue
        case .rejected: "rejected"
        }
    }
}
