import Testing

@testable import SyncGateClient

/// The client's side of the wire format (the models themselves: SyncGateWireTests).
@Suite("Wire format in the client", .timeLimit(.minutes(10)))
struct WireTests {
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
        // A proxy's absurd value is held to an hour: it would sleep for ever, or trap computing
        // the sleep's deadline.
        #expect(SyncAPI.retryAfterDuration("9223372036854775807") == .seconds(3600))
        #expect(Backoff().delay(afterFailures: 1, retryAfter: SyncAPI.retryAfterDuration("9223372036854775807")) <= .seconds(3601))
    }

    @Test("an empty household id is the user's own: one entity, as the store keeps it")
    func emptyHouseholdIsNone() {
        #expect(EntityKey(entityType: "notes", entityID: "n1", householdID: "") == EntityKey(entityType: "notes", entityID: "n1"))
        #expect(EntityKey(entityType: "notes", entityID: "n1", householdID: "").householdID == nil)
    }

    @Test("operations carry the key, base version, intent, household and timestamp; deletes carry no data")
    func operations() throws {
        let update = OutboxEntry(
            sequence: 1, idempotencyKey: "k-1", key: EntityKey(entityType: "inventory", entityID: "milk", householdID: "home"),
            intent: .update, data: ["quantity": 3, "note": nil], baseVersion: 4, followsPending: false, clientTimestamp: 1_768_471_200_123, state: .pending
        )
        #expect(update.operation.json == [
            "idempotency_key": "k-1", "entity_type": "inventory", "entity_id": "milk", "intent": "update", "base_version": 4,
            "data": ["quantity": 3, "note": nil], "client_timestamp": "2026-01-15T10:00:00.123Z", "household_id": "home",
        ])
        var delete = update
        delete.intent = .delete
        delete.data = nil
        delete.key = EntityKey(entityType: "weightLogs", entityID: "w1")
        #expect(delete.operation.json["data"] == nil)
        #expect(delete.operation.json["household_id"] == .null)
        let body = try JSONValue(parsing: OutboxEntry.pushBody([update, delete]))
        #expect(body["operations"]?.arrayValue?.count == 2)
    }

    @Test("keys compare, hash and sort by bytes: NFC and NFD ids are two entities, as on the server")
    func keysCompareByBytes() {
        let nfc = EntityKey(entityType: "notes", entityID: "caf\u{E9}"), nfd = EntityKey(entityType: "notes", entityID: "cafe\u{301}")
        #expect(nfc != nfd && Set([nfc, nfd, nfc]).count == 2)
        #expect((nfc < nfd) != (nfd < nfc), "ordered, not equal")
        #expect(!(nfc < nfc))
        #expect(EntityKey(entityType: "notes", entityID: "x") < EntityKey(entityType: "notes", entityID: "x", householdID: "h"), "the user's own first")
        // A membership id's household is what stands before its first ':' byte.
        #expect(EntityKey(entityType: "household_members", entityID: "home:\u{301}x").householdID == "home")
    }

    @Test("household membership keys follow their id; other types keep the household given")
    func keys() {
        #expect(EntityKey(entityType: "households", entityID: "home").householdID == "home")
        #expect(EntityKey(entityType: "household_members", entityID: "home:bob").householdID == "home")
        #expect(EntityKey(entityType: "inventory", entityID: "x", householdID: "h").householdID == "h")
        #expect(EntityKey(entityType: "weightLogs", entityID: "x").householdID == nil)
    }
}
