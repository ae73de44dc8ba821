package import SyncGateCore
package import SyncGateWire

/// An operator's actions on one job, as `syncgate admin job …` and the admin API take them
/// (docs/admin.md).
extension SyncStore {
    /// The admin API's overview (`syncgate admin stats --json`): ``StoreStats/json``, pending
    /// nudges, webhook deliveries by subscription, the standbys' replay lag and the devices
    /// live on each front.
    package func overview() async throws -> JSONValue {
        guard case .object(var overview) = try await stats().json else { return try await stats().json }
        let nudges = try await nudgeBacklog()
        overview["nudges"] = ["pending": .int(Int64(nudges.pending)), "oldest_pending_since": nudges.oldestPendingSince.map(JSONValue.int) ?? .null]
        overview["webhooks"] = .array(try await webhookBacklog().map { backlog in
            [
                "subscription": .string(backlog.subscription), "pending": .int(Int64(backlog.pending)), "failing": .int(Int64(backlog.failing)),
                "delivered": .int(Int64(backlog.delivered)),
            ]
        })
        overview["replicas"] = .array(try await driver.replicas().map { replica in
            ["name": .string(replica.name), "state": .string(replica.state), "replay_lag_ms": replica.replayLagMilliseconds.map(JSONValue.int) ?? .null]
        })
        overview["fronts"] = .array(try await driver.liveDevicesPerFront(now: clock.wallNow()).map { ["front": .string($0.front), "live_devices": .int(Int64($0.devices))] })
        return .object(overview)
    }

    /// A page of households by id, as `GET /admin/v1/households` and `syncgate admin households
    /// --json` answer it: `households`, `has_more`, and `after`, the next page's, while more follow.
    package func householdPage(userID: String?, after: String?, limit: Int) async throws -> (households: [HouseholdState], json: JSONValue) {
        let households = try await households(userID: userID, after: after, limit: limit + 1)
        let page = Array(households.prefix(limit))
        let more = households.count > limit
        let json: JSONValue = [
            "households": .array(page.map(\.json)), "has_more": .bool(more), "after": more ? page.last.map { .string($0.id) } ?? .null : .null,
        ]
        return (page, json)
    }

    /// Records a maintenance pass, keeping the last 50 (``maintenanceRuns(limit:)``).
    package func recordMaintenanceRun(milliseconds: Int64, report: JSONValue) async throws {
        try await driver.recordMaintenanceRun(finishedAt: clock.wallNow(), milliseconds: milliseconds, report: report.serialized(), keep: 50)
    }

    /// The last maintenance passes, newest first: `finished_at`, `milliseconds` and the report's counts.
    package func maintenanceRuns(limit: Int = 50) async throws -> [JSONValue] {
        try await driver.maintenanceRuns(limit: limit).map { run in
            var object: JSONObject = ["finished_at": .string(run.finishedAt.rfc3339), "milliseconds": .int(run.milliseconds)]
            if case .object(let report)? = try? JSONParser().parse(Array(run.report.utf8)) {
                for (name, value) in report where object[name] == nil { object[name] = value }
            }
            return .object(object)
        }
    }

    /// Jobs finished per minute over the last `minutes` minutes (the console's chart).
    package func finishedPerMinute(minutes: Int) async throws -> [(minute: Int64, done: Int, dead: Int)] {
        try await driver.finishedPerMinute(since: Timestamp(millisecondsSinceEpoch: clock.wallNow().millisecondsSinceEpoch - Int64(minutes) * 60_000))
    }

    package func jobDetail(id: Int64) async throws -> JobDetail? {
        try await driver.jobDetail(id: id)
    }

    /// Takes `action` on job `id`; `by` names the operator in a cancelled job's error.
    package func perform(_ action: JobAction, onJob id: Int64, by who: String) async throws -> JobActionOutcome {
        switch action {
        case .retry: try await retryDeadJob(id: id)
        case .cancel: try await cancelJob(id: id, reason: "cancelled by an operator (\(who))")
        case .delete: try await deleteFinishedJob(id: id)
        }
    }

    /// Finishes a job no worker has started (`queued` or `retrying`) as `dead`: every operation
    /// answers `INTERNAL`, retryable (none took effect; the device may push them again), its
    /// device's watermark advances and a client waiting for it is answered. A running job is
    /// refused: its attempt ends on its own (done, retried or dead).
    package func cancelJob(id: Int64, reason: String) async throws -> JobActionOutcome {
        let cancelled = try await driver.transaction(now: clock.now(), for: .maintenance) { transaction -> Bool in
            guard let job = try await transaction.lockWaitingJob(id: id) else { return false }
            let operations: [SyncOperation]
            do {
                operations = try JobPayload(stored: job.payload).operations
            } catch {
                // It could never have run: no results, as the claim's dead path gives it.
                operations = []
            }
            let finished = FinishedJob(
                id: id, userID: job.record.userID, deviceID: job.record.deviceID, state: .dead,
                results: JobCodec.encodeResults(OperationResult.cancelledJob(operations))
            )
            try await transaction.finishJob(finished, error: String(reason.prefix(2000)))
            try await transaction.announce([.jobFinished(finished)])
            return true
        }
        if cancelled { return .applied }
        guard let job = try await driver.jobDetail(id: id) else { return .notFound }
        return job.record.state == .queued || job.record.state == .retrying ? .waitsForEarlierJobs : .refused(job.record.state)
    }

    /// Queues a dead job again with fresh attempts.
    package func retryDeadJob(id: Int64) async throws -> JobActionOutcome {
        if try await retryDeadJobs(ids: [id]) > 0 { return .applied }
        guard let job = try await driver.jobDetail(id: id) else { return .notFound }
        return job.record.state == .dead ? .waitsForLaterJobs : .refused(job.record.state)
    }

    /// Deletes a finished job (its client then gets 404 for it, as after the job retention).
    package func deleteFinishedJob(id: Int64) async throws -> JobActionOutcome {
        try await driver.deleteFinishedJob(id: id) ? .applied : try await refusal(id)
    }

    /// Why an action found nothing to do: no such job, or the state it is in.
    private func refusal(_ id: Int64) async throws -> JobActionOutcome {
        guard let job = try await driver.jobDetail(id: id) else { return .notFound }
        return .refused(job.record.state)
    }
}

/// A user as an operator sees them, exports their data and erases it (`syncgate admin users …`,
/// `/admin/v1/users/{id}`).
extension SyncStore {
    /// The device id of the jobs an erase pushes for the user (leaving their households).
    package static let eraseDevice = DeviceID.eraseDevice

    /// The user's devices, households, feeds and recent jobs.
    package func userOverview(_ userID: String) async throws -> JSONValue {
        let context = try await driver.pullContext(userID: userID, deviceID: "", extraScopes: [])
        let devices = try await driver.devices(userID: userID, now: clock.wallNow())
        let households = try await households(userID: userID)
        let jobs = try await driver.listJobs(JobFilter(userID: userID, limit: 20))
        return [
            "user_id": .string(userID), "resync_epoch": .int(context.resyncEpoch),
            "devices": .array(devices.map(\.json)),
            "households": .array(households.map { Self.membershipJSON($0, of: userID) }),
            "feeds": .array(try await driver.feedDetails(Array(context.feeds.keys)).map { feed in
                [
                    "scope": .string(feed.scope), "head": .int(feed.head), "floor": .int(feed.floor), "compacted": .int(feed.compacted),
                    "tombstones": .int(Int64(feed.tombstones)),
                ]
            }),
            "recent_jobs": .array(jobs.map(\.summaryJSON)),
        ]
    }

    static func membershipJSON(_ household: HouseholdState, of userID: String) -> JSONValue {
        [
            "household_id": .string(household.id), "owner_id": .string(household.ownerID), "archived": .bool(household.archived),
            "role": household.role(of: userID).map { .string($0.rawValue) } ?? .null,
        ]
    }

    /// The user's data as one JSON object, written a piece at a time to `write`: their
    /// households and devices, then every live entity of their own feed, a page at a time.
    /// (Household data is the household's: it stays, and is not exported here.)
    package func exportUser(_ userID: String, pageSize: Int = 500, write: (String) async throws -> Void) async throws {
        let households = try await households(userID: userID)
        let devices = try await driver.devices(userID: userID, now: clock.wallNow())
        let head: JSONObject = [
            "user_id": .string(userID), "exported_at": .string(clock.wallNow().rfc3339),
            "households": .array(households.map { Self.membershipJSON($0, of: userID) }), "devices": .array(devices.map(\.json)),
        ]
        // The object without its closing brace, then the entities.
        try await write(String(JSONValue.object(head).serialized().dropLast()) + #","entities":["#)
        var after: EntityPosition?
        var first = true
        while true {
            let page = try await currentEntities(in: .user(userID), types: nil, after: after, limit: pageSize)
            var output: [UInt8] = []
            for entity in page {
                if !first { output.append(UInt8(ascii: ",")) }
                first = false
                entity.writeJSON(to: &output)
            }
            if !output.isEmpty { try await write(String(decoding: output, as: UTF8.self)) }
            guard page.count == pageSize, let last = page.last else { break }
            after = EntityPosition(after: last)
        }
        try await write("]}")
    }

    /// Erases the user. While they are an active member of households, it first pushes, as
    /// their own device would, a job that leaves each (archiving those they own: an owner cannot
    /// leave, and the household's other members lose it), and answers that job: erase again
    /// once it finished. Then, in one transaction: ``StorageTransaction/eraseUser(_:households:)``,
    /// and a raised resync epoch, so that every device of the user drops its data at its next
    /// pull (`force_resync`) and a waiting one is woken.
    package func eraseUser(_ userID: String) async throws -> EraseOutcome {
        let households = try await households(userID: userID)
        let active = households.filter { $0.isActiveMember(userID) }
        if !active.isEmpty {
            let unfinished = try await driver.listJobs(JobFilter(userID: userID, limit: 1000))
                .first { $0.deviceID == Self.eraseDevice && !$0.state.isFinished }
            if let unfinished { return .leavingHouseholds(jobID: unfinished.id) }
            let now = clock.wallNow()
            let operations = active.map { household in
                let key = "syncgate-erase:\(household.id):\(now.millisecondsSinceEpoch)"
                return household.isOwned(by: userID)
                    ? SyncOperation(idempotencyKey: key, entityType: "households", entityID: household.id, intent: .delete, clientTimestamp: now)
                    : SyncOperation(
                        idempotencyKey: key, entityType: "household_members", entityID: HouseholdIDs.membershipID(household: household.id, user: userID),
                        intent: .delete, clientTimestamp: now
                    )
            }
            let job = QueuedJob(userID: userID, deviceID: Self.eraseDevice, operations: operations, maximumAttempts: 5)
            switch try await driver.insertJob(job, limits: QueueLimits(maximumQueuedPerUser: .max, maximumQueuedTotal: .max), now: clock.now()) {
            case .accepted(let id): return .leavingHouseholds(jobID: id)
            case .rateLimited, .overloaded: throw StoreUnavailableError("the queue refused the erase's household job")
            }
        }
        // The households whose changes name the user's devices as writers: theirs now, and those
        // the erase's own jobs left (the user's jobs, read before the transaction deletes them).
        var named = Set(households.map(\.id))
        for job in try await driver.listJobs(JobFilter(userID: userID, limit: 1000)) where job.deviceID == Self.eraseDevice {
            guard let detail = try await driver.jobDetail(id: job.id), let payload = try? JobPayload(stored: detail.payload) else { continue }
            for operation in payload.operations {
                named.insert(
                    operation.entityType == "households"
                        ? operation.entityID : HouseholdIDs.splitMembershipID(operation.entityID, household: operation.householdID)?.household ?? operation.entityID
                )
            }
        }
        let householdIDs = named.sorted()
        return .erased(
            try await driver.transaction(now: clock.now(), for: .maintenance) { transaction in
                let erased = try await transaction.eraseUser(userID, households: householdIDs)
                try await transaction.bumpResyncEpoch(userID: userID)
                let versions = try await transaction.bumpScopesVersions(userIDs: [userID])
                try await transaction.announce([.scopesChanged(userID: userID, version: versions[ExactKey(userID)] ?? 0)])
                return erased
            }
        )
    }
}

extension EntityState {
    /// As a pulled change (`operation` `upsert`, or `delete` with `data` null): the service API's
    /// reads and the admin export.
    package func writeJSON(to output: inout [UInt8]) {
        PulledChange.write(
            entityType: key.entityType, entityID: key.entityID, householdID: key.scope.householdID,
            document: data.map(DocumentText.init), version: version, updatedAt: updatedAt, to: &output
        )
    }
}
