import SyncGateTestSupport

@testable import SyncGateClient

/// The properties a run must end with. Each appends to ``ConvergenceWorld/problems``.
///
/// Definitions, against the server's own job records (every job of every user, whatever the
/// devices heard back):
/// - A key's *decision* is its first result that is not a rejection; before it a key may be
///   rejected any number of times (rejections are not remembered, and a lost rejection is
///   pushed again).
/// - **Converged**: every device's local data is exactly what a pull from the beginning shows
///   its user (documents and versions), with nothing pending.
/// - **Never applied twice**: after a key's decision, every result of that key is `duplicate`
///   with the decision's version; and for types where each applied write makes one version
///   (lww and client_wins), the versions of the applied decisions of an entity are exactly
///   1…its current version, each once (a purge starts an entity's versions again).
/// - **No acknowledged write lost**: the entity's current state is its last applied write —
///   deleted if that write was a delete, else carrying that write's marker; and every write the
///   app made has a decision or a final rejection on the server, unless a later delete cancelled
///   it before it was ever sent.
/// - **Reported truthfully**: each write is settled once on its device, as the server last
///   decided it (status, version, error code).
extension ConvergenceWorld {
    func check() async throws {
        try await checkConvergence()
        try await checkQueriesAndStatus()
        var results: [String: [ServerTruth.Result]] = [:]
        var resultsByUser: [String: [String: [ServerTruth.Result]]] = [:]
        for user in Self.users {
            let userResults = try await ServerTruth.results(http, user: user)
            resultsByUser[user] = Dictionary(grouping: userResults, by: \.idempotencyKey)
            for result in userResults { results[result.idempotencyKey, default: []].append(result) }
        }
        checkDecisions(results)
        checkOutcomes(results)
        checkNothingLost(results)
        try await checkVersions(resultsByUser)
        for device in devices {
            tally.faults.merge(device.transport.faults, uniquingKeysWith: +)
            for event in device.events.all {
                switch event {
                case .writeSettled(let outcome): tally.outcomes[Self.status(outcome.result), default: 0] += 1
                case .resynced: tally.resyncs += 1
                case .householdsChanged(_, let left): tally.householdsLeft += left.count
                case .liveSyncFailed, .changedByService: break
                }
            }
        }
    }

    private func checkConvergence() async throws {
        for device in devices {
            let truth = try await ServerTruth.visibleState(http, user: device.user)
            let local = try await device.client.read()
            var seen: Set<EntityKey> = []
            for entity in local {
                seen.insert(entity.key)
                guard let record = truth[entity.key] else {
                    problems.append("\(device.name): has \(entity.key) = \(entity.data), which \(device.user) cannot see on the server")
                    continue
                }
                if entity.data != record.data || entity.version != record.version || entity.hasPendingWrites {
                    problems.append("\(device.name): \(entity.key) is v\(entity.version ?? 0) \(entity.data) pending \(entity.hasPendingWrites); the server has v\(record.version) \(record.data ?? [:])")
                }
            }
            for key in Set(truth.keys).subtracting(seen) {
                problems.append("\(device.name): misses \(key) = v\(truth[key]!.version) \(truth[key]!.data ?? [:])")
            }
            let outbox = try await device.client.store.outbox()
            if !outbox.isEmpty {
                problems.append("\(device.name): \(outbox.count) entries left in the outbox: \(outbox.map { "\($0.key) \($0.state)" })")
            }
        }
    }

    /// At rest, on every device: the watched query's fresh result is what filtering and ordering
    /// every entity of its type gives, its observation settles on that result, and the status
    /// says synced with nothing pending.
    private func checkQueriesAndStatus() async throws {
        for device in devices {
            let everything = try await device.client.read(type: Self.watchedQuery.type)
            let expected = everything
                .filter { ($0.data["quantity"]?.numberValue ?? -1) >= 6 }
                .sorted {
                    let (left, right) = ($0.data["quantity"]!.numberValue!, $1.data["quantity"]!.numberValue!)
                    // Ties follow the last sort key's direction: descending.
                    return left != right ? left > right : $1.key < $0.key
                }
            let fresh = try await device.client.read(Self.watchedQuery)
            if fresh != expected {
                problems.append("\(device.name): the query reads \(fresh.map(\.key)); filtering every entity gives \(expected.map(\.key))")
            }
            do {
                try await eventually("\(device.name)'s observed query to settle", every: .milliseconds(10)) {
                    device.watched.value == fresh
                }
            } catch {
                problems.append("\(device.name): the observed query ended at \(device.watched.value?.map(\.key) ?? []); a fresh read gives \(fresh.map(\.key))")
            }
            let status = device.client.status
            if status.pendingWrites != 0 || status.lastError != nil || status.connection != .connected || status.isUploading || status.isDownloading
                || status.download != nil || status.lastSyncedAt == nil
            {
                problems.append("\(device.name): at rest the status is \(status)")
            }
        }
    }

    /// The first result that is not a rejection, and what follows it.
    private func checkDecisions(_ results: [String: [ServerTruth.Result]]) {
        for (key, keyResults) in results {
            let final = keyResults.filter { !$0.retryable }
            guard let decision = final.firstIndex(where: { $0.status != "rejected" }) else { continue }
            if final[decision].status == "duplicate" {
                problems.append("key \(key): first decided as a duplicate of nothing (job \(final[decision].jobID))")
            }
            for later in final[(decision + 1)...] where later.status != "duplicate" || later.version != final[decision].version {
                problems.append("key \(key): decided \(final[decision].status) v\(final[decision].version ?? -1) in job \(final[decision].jobID), then \(later.status) v\(later.version ?? -1) in job \(later.jobID)")
            }
        }
    }

    /// Each device settles each of its writes once, as the server last decided it.
    private func checkOutcomes(_ results: [String: [ServerTruth.Result]]) {
        for device in devices {
            var reported: Set<String> = []
            for outcome in device.events.outcomes {
                if !reported.insert(outcome.idempotencyKey).inserted {
                    problems.append("\(device.name): key \(outcome.idempotencyKey) settled twice")
                }
                guard let last = results[outcome.idempotencyKey]?.last(where: { !$0.retryable }) else {
                    problems.append("\(device.name): reported \(outcome.result) for key \(outcome.idempotencyKey), which the server never decided")
                    continue
                }
                let expected: String
                switch outcome.result {
                case .applied(let version): expected = "applied v\(version)"
                case .clientWins(let version): expected = "client_wins v\(version)"
                case .merged(let version, _): expected = "merged v\(version)"
                case .serverWins(let version, _): expected = "server_wins v\(version)"
                case .duplicate(let version): expected = "duplicate v\(version)"
                case .rejected(let code, _): expected = "rejected \(code)"
                }
                let actual = last.status == "rejected" ? "rejected \(last.errorCode ?? "")" : "\(last.status) v\(last.version ?? -1)"
                if expected != actual {
                    problems.append("\(device.name): reported \(expected) for key \(outcome.idempotencyKey); the server's last decision was \(actual) (job \(last.jobID))")
                }
            }
        }
    }

    /// Every key the app was given reached a decision or a final rejection, and was reported;
    /// keys without one were cancelled by a later delete before being sent.
    private func checkNothingLost(_ results: [String: [ServerTruth.Result]]) {
        let reported = Dictionary(grouping: devices.flatMap { device in device.events.outcomes.map { (device.name, $0.idempotencyKey) } }, by: \.0)
            .mapValues { Set($0.map(\.1)) }
        let pushed = devices.reduce(into: Set<String>()) { $0.formUnion($1.transport.pushedOperations.keys) }
        for (index, write) in writes.enumerated() {
            guard let key = write.idempotencyKey else { continue }
            if results[key]?.contains(where: { !$0.retryable }) == true {
                if reported[write.device]?.contains(key) != true {
                    problems.append("\(write.device): the server decided key \(key) (\(write.key)) but the device never reported it")
                }
                continue
            }
            let cancelled = writes[(index + 1)...].contains { later in
                later.device == write.device && later.key == write.key && later.isDelete && later.idempotencyKey == nil
            }
            if !cancelled || pushed.contains(key) {
                problems.append("\(write.device): the write with key \(key) to \(write.key) at step \(write.step) never reached a decision")
            }
        }
    }

    /// Versions of lww and client_wins entities: one per applied write, and the current state
    /// is the last applied write.
    private func checkVersions(_ resultsByUser: [String: [String: [ServerTruth.Result]]]) async throws {
        let operations = devices.reduce(into: [String: JSONValue]()) { $0.merge($1.transport.pushedOperations) { first, _ in first } }
        // Entity → [(version, job, key)] of applied decisions, per lifetime (a purge starts a new one).
        struct Applied { var version: Int64; var jobID: Int64; var key: String }
        var applied: [String: [EntityKey: [Applied]]] = [:]
        for (user, byKey) in resultsByUser {
            for (key, keyResults) in byKey {
                guard let decision = keyResults.first(where: { !$0.retryable && $0.status != "rejected" }),
                    decision.status == "applied" || decision.status == "client_wins",
                    Self.oneVersionPerWrite.contains(decision.entityType), let version = decision.version
                else { continue }
                let household = operations[key]?["household_id"]?.stringValue
                let entity = EntityKey(entityType: decision.entityType, entityID: decision.entityID, householdID: household)
                // Household entities are one entity whoever wrote them; user entities are the user's.
                let owner = household == nil ? user : "household"
                applied[owner, default: [:]][entity, default: []].append(Applied(version: version, jobID: decision.jobID, key: key))
            }
        }
        let aliceRecords = try await ServerTruth.records(http, user: "alice")
        for (owner, entities) in applied {
            let records = owner == "household" ? aliceRecords : try await ServerTruth.records(http, user: owner)
            for (entity, writes) in entities {
                // Each purge that found the entity a tombstone ends a lifetime; versions start again after it.
                var lifetimes: [(end: Int64, writes: [Applied])] = []
                var after: Int64 = 0
                for purge in purges {
                    let tombstone = owner == "household" ? purge.tombstones[entity] : purge.tombstonesOfUser[owner]?[entity]
                    guard let tombstone else { continue }
                    lifetimes.append((tombstone, writes.filter { $0.jobID > after && $0.jobID <= purge.lastJobID }))
                    after = purge.lastJobID
                }
                let current = writes.filter { $0.jobID > after }
                // No record, and the lifetime's last write a delete: a purge took the tombstone after
                // its snapshot (a push the client gave up on can still be applied meanwhile, as one
                // whose answer was lost): the lifetime ended at that delete.
                let purgedSince = records[entity] == nil
                    ? current.max { $0.version < $1.version }.flatMap { operations[$0.key]?["intent"] == "delete" ? $0.version : nil }
                    : nil
                lifetimes.append((records[entity]?.version ?? purgedSince ?? 0, current))
                for (end, lifetime) in lifetimes {
                    let versions = lifetime.map(\.version).sorted()
                    if versions != Array(stride(from: 1, through: end, by: 1)) {
                        problems.append("\(owner) \(entity): applied writes made versions \(versions), the entity is at v\(end)")
                    }
                }
                // The current state is the last applied write.
                guard let record = records[entity], let last = lifetimes.last?.writes.first(where: { $0.version == record.version }) else { continue }
                let operation = operations[last.key]
                if operation?["intent"] == "delete" {
                    if record.data != nil { problems.append("\(owner) \(entity): the last applied write (\(last.key)) deleted it, but it is \(record.data!)") }
                } else if record.data?["w"] != operation?["data"]?["w"] {
                    problems.append("\(owner) \(entity): the last applied write (\(last.key)) wrote \(operation?["data"]?["w"] ?? nil), the entity holds \(record.data?["w"] ?? nil)")
                }
            }
        }
    }

    static func status(_ result: WriteOutcome.Result) -> String {
        switch result {
        case .applied: "applied"
        case .clientWins: "client_wins"
        case .merged: "merged"
        case .serverWins: "server_wins"
        case .duplicate: "duplicate"
        case .rejected(let code, _): "rejected \(code)"
        }
    }
}
