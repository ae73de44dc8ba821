import Testing

@testable import SyncGateClient

@Suite("Wire format", .timeLimit(.minutes(10)))
struct WireTests {
    @Test("every result shape of PROTOCOL.md decodes")
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
        #expect(job.jobID == "123")
        #expect(job.isFinished)
        let results = try #require(job.results)
        #expect(results.map(\.status) == [
            .applied, .duplicate, .serverWins, .serverWins, .clientWins, .merged,
            .rejected(code: "VALIDATION_ERROR", message: "no", retryable: false),
            .rejected(code: "INTERNAL", message: "died", retryable: true),
        ])
        #expect(results.map(\.version) == [4, 4, 7, 8, 8, 8, nil, nil])
        #expect(results[2].serverData == ["t": 1])
        #expect(results[3].serverData == .null)
        #expect(results[5].mergedData == ["m": 2])
    }

    @Test("a queued job has no results; a dead one has them")
    func jobStates() throws {
        let queued = try JobAnswer(json: ["job_id": "9", "status": "queued", "status_url": "/v1/jobs/9"])
        #expect(!queued.isFinished)
        let dead = try JobAnswer(json: [
            "job_id": "9", "status": "dead",
            "results": [["idempotency_key": "a", "entity_type": "t", "entity_id": "i", "status": "rejected", "error_code": "INTERNAL", "retryable": true]],
        ])
        #expect(dead.results?.first?.status == .rejected(code: "INTERNAL", message: "", retryable: true))
    }

    @Test("answers without the protocol's fields are errors, not guesses", arguments: [
        #"{"status": "done", "results": []}"#,
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
                      {"entity_type": "foodLogs", "entity_id": "fl_1", "operation": "upsert", "data": {"a": 1}, "version": 4, "updated_at": "x", "household_id": null},
                      {"entity_type": "inventory", "entity_id": "inv_9", "operation": "delete", "data": null, "version": 6, "updated_at": "x", "household_id": "h_1"},
                      {"entity_type": "households", "entity_id": "h_2", "operation": "upsert", "data": {"name": "H"}, "version": 1, "updated_at": "x", "household_id": "h_2"}
                    ], "cursor": "c2", "has_more": true, "force_resync": false, "scopes": {"added": ["h_2"], "removed": ["h_3"]},
                    "device_watermark": "123", "server_time": "x"}
                    """
            )
        )
        #expect(page.changes == [
            PullChange(key: EntityKey(entityType: "foodLogs", entityID: "fl_1"), data: ["a": 1], version: 4),
            PullChange(key: EntityKey(entityType: "inventory", entityID: "inv_9", householdID: "h_1"), data: nil, version: 6),
            PullChange(key: EntityKey(entityType: "households", entityID: "h_2", householdID: "h_2"), data: ["name": "H"], version: 1),
        ])
        #expect(page.cursor == "c2")
        #expect(page.hasMore)
        #expect(!page.forceResync)
        #expect(page.scopesAdded == ["h_2"])
        #expect(page.scopesRemoved == ["h_3"])
        #expect(page.deviceWatermark == "123")
    }

    @Test("cursor reset rule: 409 CURSOR_INVALID starts over, every other error is an error")
    func cursorReset() throws {
        let invalid = TransportResponse(status: 409, body: Array(#"{"error": {"code": "CURSOR_INVALID", "message": "old", "retryable": false}}"#.utf8))
        #expect(try SyncAPI.pullAnswer(invalid) == .cursorInvalid)
        let otherConflict = TransportResponse(status: 409, body: Array(#"{"error": {"code": "SOMETHING", "message": "?"}}"#.utf8))
        #expect(throws: SyncGateClientError.self) { try SyncAPI.pullAnswer(otherConflict) }
        let busy = TransportResponse(status: 503, headers: ["retry-after": "2"], body: Array(#"{"error": {"code": "UNAVAILABLE", "message": "db"}}"#.utf8))
        let error = SyncAPI.error(for: busy)
        #expect(error.code == .server)
        #expect(error.serverCode == "UNAVAILABLE")
        #expect(error.retryAfter == .seconds(2))
        #expect(error.isRetryable)
        #expect(!SyncAPI.error(for: TransportResponse(status: 403)).isRetryable)
        #expect(SyncAPI.error(for: TransportResponse(status: 429, body: Array("not json".utf8))).isRetryable)
        #expect(SyncAPI.error(for: TransportResponse(status: 401)).code == .unauthenticated)
        #expect(SyncAPI.retryAfterDuration(" 7 ") == .seconds(7))
        #expect(SyncAPI.retryAfterDuration("Wed, 21 Oct 2015 07:28:00 GMT") == nil)
    }

    @Test("operations carry the key, base version, intent, household and timestamp; deletes carry no data")
    func operations() throws {
        let update = OutboxEntry(
            sequence: 1, idempotencyKey: "k-1", key: EntityKey(entityType: "inventory", entityID: "milk", householdID: "home"),
            intent: .update, data: ["quantity": 3, "note": nil], baseVersion: 4, followsPending: false, clientTimestamp: 1_768_471_200_123, state: .pending
        )
        #expect(update.wireOperation == [
            "idempotency_key": "k-1", "entity_type": "inventory", "entity_id": "milk", "intent": "update", "base_version": 4,
            "data": ["quantity": 3, "note": nil], "client_timestamp": "2026-01-15T10:00:00.123Z", "household_id": "home",
        ])
        var delete = update
        delete.intent = .delete
        delete.data = nil
        delete.key = EntityKey(entityType: "weightLogs", entityID: "w1")
        #expect(delete.wireOperation["data"] == nil)
        #expect(delete.wireOperation["household_id"] == .null)
        let body = try JSONValue(parsing: OutboxEntry.pushBody([update, delete]))
        #expect(body["operations"]?.arrayValue?.count == 2)
    }

    @Test("timestamps are RFC 3339 UTC with milliseconds", arguments: [
        (Int64(0), "1970-01-01T00:00:00.000Z"),
        (Int64(1_768_471_200_123), "2026-01-15T10:00:00.123Z"),
        (Int64(951_782_400_000), "2000-02-29T00:00:00.000Z"),
        (Int64(4_107_542_399_999), "2100-02-28T23:59:59.999Z"),
        (Int64(-1), "1969-12-31T23:59:59.999Z"),
    ])
    func timestamps(_ milliseconds: Int64, _ text: String) {
        #expect(WireTimestamp.format(milliseconds: milliseconds) == text)
    }

    @Test("household membership keys follow their id; other types keep the household given")
    func keys() {
        #expect(EntityKey(entityType: "households", entityID: "home").householdID == "home")
        #expect(EntityKey(entityType: "household_members", entityID: "home:bob").householdID == "home")
        #expect(EntityKey(entityType: "inventory", entityID: "x", householdID: "h").householdID == "h")
        #expect(EntityKey(entityType: "weightLogs", entityID: "x").householdID == nil)
    }
}
