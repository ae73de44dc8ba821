import SyncGateWire
import SyncGateConcurrency
import Foundation

/// Fans ``SyncEvent``s out to every current subscriber.
final class EventHub: Sendable {
    private let subscribers = Locked<[UUID: AsyncStream<SyncEvent>.Continuation]?>([:])

    /// A new subscription; it ends when the hub finishes or the stream is dropped.
    func subscribe() -> AsyncStream<SyncEvent> {
        // A subscriber that stops reading keeps the newest events, not unbounded memory.
        let (stream, continuation) = AsyncStream.makeStream(of: SyncEvent.self, bufferingPolicy: .bufferingNewest(10_000))
        let id = UUID()
        let added = subscribers.update { subscribers -> Bool in
            guard subscribers != nil else { return false }
            subscribers?[id] = continuation
            return true
        }
        guard added else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.update { $0?.removeValue(forKey: id) }
        }
        return stream
    }

    func emit(_ event: SyncEvent) {
        for continuation in subscribers.update({ Array(($0 ?? [:]).values) }) {
            continuation.yield(event)
        }
    }

    func finish() {
        let all = subscribers.update { subscribers -> [AsyncStream<SyncEvent>.Continuation] in
            defer { subscribers = nil }
            return Array((subscribers ?? [:]).values)
        }
        all.forEach { $0.finish() }
    }
}
