/// A push answer (200 or 202) or a job status: the job and, once it is finished, its results.
struct JobAnswer: Sendable, Hashable {
    var jobID: String
    /// `queued`, `running`, `retrying`, `done` or `dead`.
    var status: String
    /// Present once the job is `done` or `dead`, in the order of the pushed operations.
    var results: [WireResult]?

    var isFinished: Bool { results != nil }

    init(jobID: String, status: String, results: [WireResult]?) {
        self.jobID = jobID
        self.status = status
        self.results = results
    }

    init(json: JSONValue) throws(WireFormatError) {
        guard let jobID = json["job_id"]?.stringValue, let status = json["status"]?.stringValue else {
            throw WireFormatError("a job without job_id or status")
        }
        self.jobID = jobID
        self.status = status
        if status == "done" || status == "dead" {
            guard let results = json["results"]?.arrayValue else { throw WireFormatError("a finished job without results") }
            var decoded: [WireResult] = []
            for result in results { decoded.append(try WireResult(json: result)) }
            self.results = decoded
        } else {
            self.results = nil
        }
    }
}
