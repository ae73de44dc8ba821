import SyncGateWire
import Testing

/// The protocol's models read and write the wire format both ways, for the server and the SDK.
@Suite("Wire models", .timeLimit(.minutes(10)))
struct ModelTests {
    @Test("every result shape of the protocol decodes, and encodes back to the same JSON")
    func results() throws {
        let answer = try JSONValue(
            parsing: """
                {"job_id": "123", "status": "done", "server_time": "2026-01-15T10:00:00.000Z", "results": [
                {"idempotency_key": "k1", "entity_type": "foodLogs", "entity_id": "fl_1", "status": "applied", "version": 4},
                {"idempotency_key": "k2", "entity_type": "foodLogs", "entity_id": "fl_1", "status": "duplicate", "version": 4},
                {"idempotency_key": "k3", "entity_type": "notes", "entity_id": "n_1", "status": "conflict", "resolution": "server_wins", "version": 7, "server_data": {"t": 1}},
                {"idempotency_key": "k3b", "entity_type": "notes", "entity_id": "n_1", "status": "conflict", "resolution": "server_wins", "version": 8, "server_data": null},
                {"idempotency_key": "k4", "entity_type": "notes", "entity_id": "n_1", "status": "conflict", "resolution": "client_wins", "version": 8},
                {"idempotency_key": "k5", "entity_type": "foodLogs", "entity_id": "fl_2", "status": "conflict", "resolution": "merged", "version": 8, "data": {"m": 2}},
                {"idempotency_key": "k6", "entity_type": "timeEntries", "entity_id": "te_9", "status": "rejected", "error_code": "VALIDATION_ERROR", "error_message": "no", "retryable": false},
                {"idempotency_key": "k7", "entity_type": "timeEntries", "entity_id": "te_9", "status": "rejected", "error_code": "INTERNAL", "error_message": "died", "retryable": true}
                ]}
                """
        )
        let job = try JobAnswer(json: answer)
        #expect(job.jobID == 123 && job.state == .done && job.isFinished)
        #expect(job.serverTime == Timestamp(rfc3339: "2026-01-15T10:00:00.000Z"))
        let results = try #require(job.results)
        #expect(results.map(\.status) == [
            .applied, .duplicate, .conflict(.serverWins), .conflict(.serverWins), .conflict(.clientWins), .conflict(.merged),
            .rejected(errorCode: "VALIDATION_ERROR", message: "no", retryable: false),
            .rejected(errorCode: "INTERNAL", message: "died", retryable: true),
        ])
        #expect(results.map(\.version) == [4, 4, 7, 8, 8, 8, nil, nil])
        #expect(results[2].serverData == ["t": 1])
        #expect(results[3].serverData == nil, "deleted on the server")
        #expect(results[5].mergedData == ["m": 2])
        #expect(job.json == answer, "written back as it was read")
    }

    @Test("a queued job has no results and may say where to follow it; a dead one has them")
    func jobStates() throws {
        let queued = try JobAnswer(json: ["job_id": "9", "status": "queued", "status_url": "/v1/jobs/9"])
        #expect(!queued.isFinished && queued.results == nil && queued.statusURL == JobAnswer.statusURL(of: 9))
        let dead = try JobAnswer(json: [
            "job_id": "9", "status": "dead",
            "results": [["idempotency_key": "a", "entity_type": "t", "entity_id": "i", "status": "rejected", "error_code": "INTERNAL", "retryable": true]],
        ])
        #expect(dead.results?.first?.status == .rejected(errorCode: "INTERNAL", message: "", retryable: true))
    }

    @Test("answers without the protocol's fields are errors, not guesses", arguments: [
        #"{"status": "done", "results": []}"#,
        #"{"job_id": "1", "status": "finished", "results": []}"#,
        #"{"job_id": "1", "status": "done"}"#,
        #"{"job_id": "1", "status": "done", "results": [{"idempotency_key": "a", "entity_type": "t", "entity_id": "i", "status": "applied"}]}"#,
        #"{"job_id": "1", "status": "done", "results": [{"idempotency_key": "a", "entity_type": "t", "entity_id": "i", "status": "conflict", "resolution": "maybe", "version": 1}]}"#,
        #"{"job_id": "1", "status": "done", "results": [{"idempotency_key": "a", "entity_type": "t", "entity_id": "i", "status": "conflict", "resolution": "merged", "version": 1}]}"#,
        #"{"job_id": "1", "status": "done", "results": [{"idempotency_key": "a", "entity_type": "t", "entity_id": "i", "status": "weird", "version": 1}]}"#,
    ])
    func malformedJobs(_ text: String) throws {
        #expect(throws: WireFormatError.self) { try JobAnswer(json: try JSONValue(parsing: text)) }
    }

    @Test("a pull page decodes changes, deletes, households and scopes")
    func pullPage() throws {
        let page = try PullPage(
            json: JSONValue(
                parsing: """
                    {"changes": [
                      {"entity_type": "foodLogs", "entity_id": "fl_1", "operation": "upsert", "data": {"a": 1}, "version": 4, "updated_at": "2026-01-15T10:00:00.123Z", "household_id": null},
                      {"entity_type": "inventory", "entity_id": "inv_9", "operation": "delete", "data": null, "version": 6, "updated_at": "2026-01-15T10:00:00.123Z", "household_id": "h_1"}
                    ], "cursor": "c2", "has_more": true, "force_resync": false, "scopes": {"added": ["h_2"], "removed": ["h_3"]},
                    "device_watermark": "123", "server_time": "2026-01-15T10:00:01.000Z"}
                    """
            )
        )
        let at = try #require(Timestamp(rfc3339: "2026-01-15T10:00:00.123Z"))
        #expect(page.changes == [
            PulledChange(entityType: "foodLogs", entityID: "fl_1", data: ["a": 1], version: 4, updatedAt: at),
            PulledChange(entityType: "inventory", entityID: "inv_9", householdID: "h_1", data: nil, version: 6, updatedAt: at),
        ])
        #expect(page.cursor == "c2" && page.hasMore && !page.forceResync)
        #expect(page.scopesAdded == ["h_2"] && page.scopesRemoved == ["h_3"])
        #expect(page.deviceWatermark == 123)
        #expect(try PullPage(json: page.json) == page, "written as it is read")
    }

    /// The server writes a page's documents as their stored text, not as trees: the bytes must
    /// read back as the page's JSON.
    @Test("a page written with stored documents reads as the page's JSON")
    func pageWriter() throws {
        let at = try #require(Timestamp(rfc3339: "2026-01-15T10:00:00.123Z"))
        let document = try DocumentText(checking: #"{ "q" : 5, "note": "a \"b\"" }"#, parser: JSONParser())
        let changes = [
            PulledChange(entityType: "inventory", entityID: "milk", householdID: "home", data: document.object, version: 3, updatedAt: at),
            PulledChange(entityType: "weightLogs", entityID: "w\u{2028}1", data: nil, version: 9, updatedAt: at),
        ]
        let page = PullPage(changes: changes, envelope: .init(cursor: "c", hasMore: false, scopesAdded: ["home"], deviceWatermark: 7, serverTime: at))
        var bytes: [UInt8] = []
        PullPage.write(page.envelope, to: &bytes) { output in
            PulledChange.write(entityType: "inventory", entityID: "milk", householdID: "home", document: document, version: 3, updatedAt: at, to: &output)
            output.append(UInt8(ascii: ","))
            PulledChange.write(entityType: "weightLogs", entityID: "w\u{2028}1", householdID: nil, document: nil, version: 9, updatedAt: at, to: &output)
        }
        #expect(try JSONParser().parse(bytes) == page.json)
    }

    @Test("an operation carries the key, base version, intent, household and timestamp; a delete no data")
    func operations() throws {
        let at = try #require(Timestamp(rfc3339: "2026-01-15T10:00:00.123Z"))
        let update = SyncOperation(
            idempotencyKey: "k-1", entityType: "inventory", entityID: "milk", intent: .update, baseVersion: 4, data: ["quantity": 3, "note": nil],
            clientTimestamp: at, householdID: "home"
        )
        #expect(update.json == [
            "idempotency_key": "k-1", "entity_type": "inventory", "entity_id": "milk", "intent": "update", "base_version": 4,
            "data": ["quantity": 3, "note": nil], "client_timestamp": "2026-01-15T10:00:00.123Z", "household_id": "home",
        ])
        let delete = SyncOperation(idempotencyKey: "k-2", entityType: "weightLogs", entityID: "w1", intent: .delete, clientTimestamp: at)
        #expect(delete.json["data"] == nil && delete.json["household_id"] == .null)
    }

    @Test("an update's patch: fields replace, null removes; and the patch between two documents")
    func patches() {
        let document: JSONObject = ["a": 1, "b": "x", "c": [1]]
        #expect(document.patched(with: ["b": "y", "c": nil, "d": true]) == ["a": 1, "b": "y", "d": true])
        let changed: JSONObject = ["a": 1, "b": "y", "d": true]
        #expect(document.patch(to: changed) == ["b": "y", "c": nil, "d": true])
        #expect(document.patched(with: document.patch(to: changed)) == changed)
    }
}
