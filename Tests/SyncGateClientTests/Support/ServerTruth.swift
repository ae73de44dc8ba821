import SyncGateClient
import SyncGateCore
import SyncGateWire
import SyncGateStorage
import SyncGateTestSupport

/// What the server holds, read past the client: the state a user may see (a pull from the
/// beginning) and every job's results (the store's own records), in the client's types.
enum ServerTruth {
    /// An entity's latest change: `data` `nil` for a tombstone.
    struct Record: Hashable, Sendable {
        var version: Int64
        var data: SyncGateClient.JSONObject?
    }

    /// One operation's result in one job.
    struct Result: Hashable, Sendable {
        var jobID: Int64
        var idempotencyKey: String
        var entityType: String
        var entityID: String
        /// `applied`, `duplicate`, `server_wins`, `client_wins`, `merged`, or `rejected`.
        var status: String
        var version: Int64?
        var errorCode: String?
        var retryable: Bool
    }

    /// Every entity the user can pull, tombstones included, at its highest version.
    static func records(_ http: HTTPHarness, user: String) async throws -> [SyncGateClient.EntityKey: Record] {
        var records: [SyncGateClient.EntityKey: Record] = [:]
        for change in try await http.pullAll(user: user, device: "truth").changes {
            guard let type = change["entity_type"]?.stringValue, let id = change["entity_id"]?.stringValue,
                let version = change["version"]?.integerValue
            else { throw TestEnvironmentError(description: "a change without type, id or version: \(change)") }
            let key = SyncGateClient.EntityKey(entityType: type, entityID: id, householdID: change["household_id"]?.stringValue)
            let data = try change["data"].flatMap { $0.isNull ? nil : try SyncGateClient.JSONValue(parsing: $0.serialized()).objectValue }
            if let known = records[key], known.version >= version { continue }
            records[key] = Record(version: version, data: data)
        }
        return records
    }

    /// The live documents a user can see: what every device of theirs must end with.
    static func visibleState(_ http: HTTPHarness, user: String) async throws -> [SyncGateClient.EntityKey: Record] {
        try await records(http, user: user).filter { $0.value.data != nil }
    }

    /// Every result of every finished job of `user`, oldest job first.
    static func results(_ http: HTTPHarness, user: String) async throws -> [Result] {
        // The listing leaves results out; each job is read again with them.
        let jobs = try await http.store.store.listJobs(JobFilter(userID: user, limit: 1_000_000))
        var results: [Result] = []
        for listed in jobs.sorted(by: { $0.id < $1.id }) {
            guard let job = try await http.store.store.job(id: listed.id, userID: user) else { continue }
            // A finished job without results is a StoredDataError here.
            for result in try job.decodedResults() ?? [] {
                var converted = Result(
                    jobID: job.id, idempotencyKey: result.idempotencyKey, entityType: result.entityType, entityID: result.entityID,
                    status: "", version: result.version, errorCode: nil, retryable: false
                )
                switch result.status {
                case .applied: converted.status = "applied"
                case .duplicate: converted.status = "duplicate"
                case .conflict(let resolution): converted.status = resolution.rawValue
                case .rejected(let code, _, let retryable):
                    converted.status = "rejected"
                    converted.errorCode = code
                    converted.retryable = retryable
                }
                results.append(converted)
            }
        }
        return results
    }

    /// Jobs not finished yet, for waiting until the queue is idle.
    static func unfinishedJobs(_ http: HTTPHarness) async throws -> Int {
        let stats = try await http.store.store.stats()
        return (stats.jobsByState[.queued] ?? 0) + (stats.jobsByState[.running] ?? 0) + (stats.jobsByState[.retrying] ?? 0)
    }

    /// The highest job id so far.
    static func lastJobID(_ http: HTTPHarness, users: [String]) async throws -> Int64 {
        var last: Int64 = 0
        for user in users {
            last = max(last, try await http.store.store.listJobs(JobFilter(userID: user, limit: 1)).first?.id ?? 0)
        }
        return last
    }
}
