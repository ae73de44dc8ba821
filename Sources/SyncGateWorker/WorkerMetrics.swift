import CoreMetrics
import Metrics
import SyncGateCore
import SyncGateWire
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
    let attempts = MetricHandles<String, Counter> { outcome in
        Counter(label: MetricName.jobAttempts, dimensions: [("outcome", outcome)])
    }
    let operationCounts = MetricHandles<OperationKey, Counter> { key in
        Counter(label: MetricName.operations, dimensions: [("entity_type", key.entityType), ("result", key.result)])
    }

    func attempt(_ outcome: Outcome) {
        attempts[outcome.rawValue].increment()
    }

    /// Counts a finished job's operations by entity type and result. A type the collections do
    /// not define (a client can push any name; it is rejected) counts as `unknown`, so clients
    /// cannot grow the label set.
    func operations(_ results: [OperationResult], collections: Collections) {
        var counts: [WorkerMetrics.OperationKey: Int] = [:]
        for result in results {
            let type = collections[result.entityType] == nil ? "unknown" : result.entityType
            counts[OperationKey(entityType: type, result: result.status.metricLabel), default: 0] += 1
        }
        for (key, count) in counts {
            operationCounts[key].increment(by: count)
        }
    }

    struct OperationKey: Hashable, Sendable {
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
