package import SyncGateCore
package import SyncGateWire

// A push's life as a job, one type per stage: queued (``QueuedJob``), claimed by a worker
// (``ClaimedJob``), finished (``FinishedJob``); and the job as read back, in any state
// (``JobRecord``).

/// A push to queue, its operations already in their storage format (``JobCodec``).
package struct QueuedJob: Sendable, Hashable {
    package var userID: String
    package var deviceID: String
    package var maximumAttempts: Int
    package var operationCount: Int
    /// The operations and the push's trace context as stored (``JobCodec/encode(_:traceContext:)``).
    package var payload: String

    /// - Parameter traceContext: the push's trace context, stored with the job so the worker's
    ///   spans join its trace.
    package init(userID: String, deviceID: String, operations: [SyncOperation], maximumAttempts: Int, traceContext: [String: String] = [:]) {
        self.userID = userID
        self.deviceID = deviceID
        self.maximumAttempts = maximumAttempts
        self.operationCount = operations.count
        self.payload = JobCodec.encode(operations, traceContext: traceContext)
    }
}

/// What a claimed job applies: its operations and the push's trace context.
package struct JobPayload: Sendable, Hashable {
    package var operations: [SyncOperation]
    /// Empty when the push had none.
    package var traceContext: [String: String]

    package init(operations: [SyncOperation], traceContext: [String: String] = [:]) {
        self.operations = operations
        self.traceContext = traceContext
    }

    /// Decodes a stored payload; one that does not decode can never run (its job goes `dead`).
    package init(stored text: String) throws(JobPayloadError) {
        (operations, traceContext) = try JobCodec.decodeJob(text)
    }
}

/// A job a worker holds, its lease fencing every write it makes. Drivers hand it out with the
/// payload as stored (`ClaimedJob<String>`); the store decodes it for workers
/// (`ClaimedJob<JobPayload>`).
package struct ClaimedJob<Payload: Sendable & Hashable>: Sendable, Hashable {
    package var lease: JobLease
    package var userID: String
    package var deviceID: String
    /// Attempts so far, this one included.
    package var attempts: Int
    package var maximumAttempts: Int
    /// When the push was enqueued.
    package var createdAt: Timestamp
    package var payload: Payload

    package init(lease: JobLease, userID: String, deviceID: String, attempts: Int, maximumAttempts: Int, createdAt: Timestamp, payload: Payload) {
        self.lease = lease
        self.userID = userID
        self.deviceID = deviceID
        self.attempts = attempts
        self.maximumAttempts = maximumAttempts
        self.createdAt = createdAt
        self.payload = payload
    }

    package var id: Int64 { lease.id }
    package var device: DeviceKey { DeviceKey(userID: userID, deviceID: deviceID) }

    /// The same job carrying `payload` instead.
    package func with<Other>(payload: Other) -> ClaimedJob<Other> {
        ClaimedJob<Other>(
            lease: lease, userID: userID, deviceID: deviceID, attempts: attempts, maximumAttempts: maximumAttempts, createdAt: createdAt, payload: payload
        )
    }
}

extension ClaimedJob where Payload == JobPayload {
    package var operations: [SyncOperation] { payload.operations }
}

/// A claimed job's id and the token of the claim that holds it.
package struct JobLease: Sendable, Hashable {
    package var id: Int64
    package var token: String

    package init(id: Int64, token: String) {
        self.id = id
        self.token = token
    }
}

/// How a job ended: `done` or `dead`, its results in their stored form (the wire form,
/// ``JobCodec/encodeResults(_:)``), which a push's answer carries as they are.
package struct FinishedJob: Sendable, Hashable {
    package var id: Int64
    package var userID: String
    package var deviceID: String
    package var state: JobState
    package var results: String

    package init(id: Int64, userID: String, deviceID: String, state: JobState, results: String) {
        self.id = id
        self.userID = userID
        self.deviceID = deviceID
        self.state = state
        self.results = results
    }

    package var device: DeviceKey { DeviceKey(userID: userID, deviceID: deviceID) }

    /// The results decoded; stored results that do not decode are a ``StoredDataError``.
    package func decodedResults() throws(StoredDataError) -> [OperationResult] {
        do {
            return try JobCodec.decodeResults(results)
        } catch {
            throw StoredDataError("job \(id): \(error.message)")
        }
    }
}

/// A job as stored, in whatever state it is; its results still in their stored form.
package struct JobRecord: Sendable, Hashable {
    package var id: Int64
    package var userID: String
    package var deviceID: String
    package var state: JobState
    package var attempts: Int
    package var maximumAttempts: Int
    package var operationCount: Int
    /// The results as stored (only a finished job has them).
    package var storedResults: String?
    package var lastError: String?
    package var createdAt: Timestamp
    package var finishedAt: Timestamp?

    /// A row as a driver read it: a state this release does not know is a ``StoredDataError``.
    package init(
        id: Int64, userID: String, deviceID: String, state: String, attempts: Int, maximumAttempts: Int, operationCount: Int,
        storedResults: String?, lastError: String?, createdAt: Timestamp, finishedAt: Timestamp?
    ) throws(StoredDataError) {
        guard let known = JobState(rawValue: state) else { throw StoredDataError("job \(id) has an unknown state '\(state)'") }
        self.id = id
        self.userID = userID
        self.deviceID = deviceID
        self.state = known
        self.attempts = attempts
        self.maximumAttempts = maximumAttempts
        self.operationCount = operationCount
        self.storedResults = storedResults
        self.lastError = lastError
        self.createdAt = createdAt
        self.finishedAt = finishedAt
    }

    /// How it ended; nil while it is unfinished. A finished job without results is a ``StoredDataError``.
    package func finished() throws(StoredDataError) -> FinishedJob? {
        guard state.isFinished else { return nil }
        guard let storedResults else { throw StoredDataError("job \(id) is \(state.rawValue) but has no results") }
        return FinishedJob(id: id, userID: userID, deviceID: deviceID, state: state, results: storedResults)
    }

    /// The results decoded (nil while unfinished).
    package func decodedResults() throws(StoredDataError) -> [OperationResult]? {
        try finished()?.decodedResults()
    }
}
