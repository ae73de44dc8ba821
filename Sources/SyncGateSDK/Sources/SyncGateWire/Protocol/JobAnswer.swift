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

/// A push's answer (`200` or `202`) and a job's status (`GET /v1/jobs/{id}`): the job and, once it
/// is finished, its results in the order of the pushed operations.
public struct JobAnswer: Sendable, Hashable {
    public var jobID: Int64
    public var state: JobState
    /// Present exactly when the job is finished (`done` or `dead`).
    public var results: [OperationResult]?
    /// A push not finished in time (`202`): where to follow it, also its `Location`.
    public var statusURL: String?
    public var serverTime: Timestamp

    public init(jobID: Int64, state: JobState, results: [OperationResult]? = nil, statusURL: String? = nil, serverTime: Timestamp = .now()) {
        self.jobID = jobID
        self.state = state
        self.results = results
        self.statusURL = statusURL
        self.serverTime = serverTime
    }

    public var isFinished: Bool { state.isFinished }

    /// `GET /v1/jobs/{id}` of a job.
    public static func statusURL(of jobID: Int64) -> String { "/v1/jobs/\(jobID)" }

    /// The answer's JSON: `results` once the job is finished.
    public var json: JSONValue {
        var body: JSONObject = [
            "job_id": .string(String(jobID)),
            "status": .string(state.rawValue),
            "server_time": .string(serverTime.rfc3339),
        ]
        if state.isFinished { body["results"] = .array((results ?? []).map(\.json)) }
        if let statusURL { body["status_url"] = .string(statusURL) }
        return .object(body)
    }

    /// A finished job's answer with its results as already-checked JSON text (an array), written
    /// as they are: decoding a thousand stored results only to write them again was most of a
    /// large push's answer. Keys in the writer's (sorted) order.
    public static func finishedBytes(jobID: Int64, state: JobState, results: [UInt8], serverTime: Timestamp = .now()) -> [UInt8] {
        var body: [UInt8] = []
        body.reserveCapacity(results.count + 128)
        body.append(contentsOf: #"{"job_id":""#.utf8)
        body.append(contentsOf: String(jobID).utf8)
        body.append(contentsOf: #"","results":"#.utf8)
        body.append(contentsOf: results)
        body.append(contentsOf: #","server_time":""#.utf8)
        body.append(contentsOf: serverTime.rfc3339.utf8)
        body.append(contentsOf: #"","status":""#.utf8)
        body.append(contentsOf: state.rawValue.utf8)
        body.append(contentsOf: #""}"#.utf8)
        return body
    }

    /// Reads an answer; the results of a finished job must be there and each one a result.
    public init(json: JSONValue) throws(WireFormatError) {
        guard let id = json["job_id"]?.stringValue.flatMap({ Int64($0) }) else { throw WireFormatError("a job answer without a job_id") }
        guard let state = json["status"]?.stringValue.flatMap(JobState.init(rawValue:)) else {
            throw WireFormatError("job \(id): status \(json["status"]?.serialized() ?? "missing")")
        }
        self.jobID = id
        self.state = state
        self.statusURL = json["status_url"]?.stringValue
        self.serverTime = json["server_time"]?.stringValue.flatMap(Timestamp.init(rfc3339:)) ?? Timestamp(millisecondsSinceEpoch: 0)
        guard state.isFinished else {
            results = nil
            return
        }
        guard let results = json["results"]?.arrayValue else { throw WireFormatError("finished job \(id) without results") }
        var decoded: [OperationResult] = []
        decoded.reserveCapacity(results.count)
        for result in results { decoded.append(try OperationResult(json: result)) }
        self.results = decoded
    }
}
