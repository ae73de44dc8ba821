import SyncGateWire
/// What the push of a batch came to, for the engine.
struct PushSettlement: Sendable, Hashable {
    /// One per entry the server decided, in batch order.
    var outcomes: [WriteOutcome] = []
    /// Entries that stay in the outbox to be pushed again with the same key: a retryable
    /// rejection (`INTERNAL` of a dead job), or no result at all.
    var retryable: [String] = []
}

extension ReplicaSlice {
    /// Applies the results of a pushed batch (matched by idempotency key).
    ///
    /// - applied, client_wins, duplicate: acknowledged at the result's version; stays in the
    ///   local view until the server state catches up (see ``OutboxEntry/State/acknowledged(version:epoch:jobID:)``).
    /// - merged: the merged document is the server's state at that version; the entry leaves.
    /// - server_wins: the server's document (or its absence) is the state; the entry leaves.
    /// - rejected: the entry leaves, and the local view falls back to the server's state;
    ///   retryable rejections stay to be pushed again.
    ///
    /// An entry that followed one of these takes its resulting version as base version when the
    /// write took effect; after a loss or a rejection it keeps the base version it was made on.
    ///
    /// - Parameter unreadable: households of the batch the device does not read now (it left
    ///   them while the batch was in flight, or has not pulled them yet). A server document
    ///   for one of them is not adopted: the device may no longer see it, and nothing would
    ///   remove it again; a pull brings the household's state if the user is a member.
    mutating func settle(batch: [String], results: [OperationResult], jobID: Int64? = nil, pullEpoch: Int64, unreadable: Set<String> = []) -> PushSettlement {
        var settlement = PushSettlement()
        var byKey: [String: OperationResult] = [:]
        for result in results { byKey[result.idempotencyKey] = result }
        var leaving: Set<String> = []

        for idempotencyKey in batch {
            guard let index = outbox.firstIndex(where: { $0.idempotencyKey == idempotencyKey }), case .sent = outbox[index].state else { continue }
            let entry = outbox[index]
            guard let result = byKey[idempotencyKey] else {
                outbox[index].state = .sent(jobID: nil)
                settlement.retryable.append(idempotencyKey)
                continue
            }
            let version = result.version ?? 0
            let outcome: WriteOutcome.Result
            switch result.status {
            case .applied:
                outcome = .applied(version: version)
                acknowledge(at: index, version: version, epoch: pullEpoch, jobID: jobID)
            case .conflict(.clientWins):
                outcome = .clientWins(version: version)
                acknowledge(at: index, version: version, epoch: pullEpoch, jobID: jobID)
            case .duplicate:
                outcome = .duplicate(version: version)
                acknowledge(at: index, version: version, epoch: pullEpoch, jobID: jobID)
            case .conflict(.merged):
                let data = result.mergedData ?? [:]
                outcome = .merged(version: version, data: data)
                if !entry.key.isIn(unreadable) { adopt(data, version: version, for: entry.key) }
                rebaseFollower(of: index, on: version)
                leaving.insert(idempotencyKey)
            case .conflict(.serverWins):
                let data = result.serverData
                outcome = .serverWins(version: version, data: data)
                if !entry.key.isIn(unreadable) { adopt(data, version: version, for: entry.key) }
                rebaseFollower(of: index, on: nil)
                leaving.insert(idempotencyKey)
            case .rejected(let code, let message, let retryable):
                if retryable {
                    outbox[index].state = .sent(jobID: nil)
                    settlement.retryable.append(idempotencyKey)
                    continue
                }
                outcome = .rejected(code: code, message: message)
                rebaseFollower(of: index, on: nil)
                leaving.insert(idempotencyKey)
            }
            settlement.outcomes.append(WriteOutcome(idempotencyKey: idempotencyKey, key: entry.key, result: outcome))
        }
        outbox.removeAll { leaving.contains($0.idempotencyKey) }
        tidy()
        return settlement
    }

    /// Refuses one entry for good without the server deciding it (a single write the server
    /// will never accept as a request, e.g. one over the body limit).
    mutating func refuse(idempotencyKey: String, code: String, message: String) -> WriteOutcome? {
        guard let index = outbox.firstIndex(where: { $0.idempotencyKey == idempotencyKey }) else { return nil }
        let entry = outbox[index]
        rebaseFollower(of: index, on: nil)
        outbox.remove(at: index)
        tidy()
        return WriteOutcome(idempotencyKey: entry.idempotencyKey, key: entry.key, result: .rejected(code: code, message: message))
    }

    private mutating func acknowledge(at index: Int, version: Int64, epoch: Int64, jobID: Int64?) {
        outbox[index].state = .acknowledged(version: version, epoch: epoch, jobID: jobID)
        rebaseFollower(of: index, on: version)
    }

    /// The server's document at `version` (`nil`: deleted), unless the local one is newer or a
    /// pull deleted the entity at `version` or later.
    mutating func adopt(_ data: JSONObject?, version: Int64, for key: EntityKey) {
        // A stale record (a resync is under way) is replaced: the answer is the server's state now.
        if let record = server[key], record.version >= version, !record.stale { return }
        if server[key] == nil, let deleted = tombstones[key], deleted >= version { return }
        if let data {
            server[key] = ServerRecord(version: version, data: data)
            tombstones[key] = nil
        } else {
            server[key] = nil
            tombstones[key] = max(version, tombstones[key] ?? version)
        }
    }

    /// The next entry of the same entity stops waiting; it takes `version` as its base version
    /// when the entry it followed took effect there.
    private mutating func rebaseFollower(of index: Int, on version: Int64?) {
        let key = outbox[index].key
        guard let next = outbox.indices.first(where: { $0 > index && outbox[$0].key == key && !outbox[$0].isAcknowledged }),
            outbox[next].followsPending
        else { return }
        outbox[next].followsPending = false
        if let version { outbox[next].baseVersion = version }
    }
}

extension EntityKey {
    fileprivate func isIn(_ households: Set<String>) -> Bool {
        householdID.map(households.contains) ?? false
    }
}
