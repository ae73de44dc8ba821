import PostgresNIO
import SyncGateCore
import SyncGateWire
import SyncGateStorage
import SyncGateTestSupport
import Testing

@testable import SyncGateHTTP
@testable import SyncGatePostgres

/// What failures say, and to whom: the cause for the operator, never the user's data; the
/// client learns the protocol code and nothing of the server's internals.
@Suite(.timeLimit(.minutes(10))) struct ErrorDisclosureTests {
    /// PostgresNIO's debug description prints every bind and the server's DETAIL; a PostgreSQL
    /// error leaves the driver as a ``PostgresFailure`` that keeps SQLSTATE and message only.
    @Test func aPostgresErrorCarriesItsCauseButNoBoundValue() async throws {
        try await StoreHarness.with(.postgres) { harness in
            let driver = try #require(harness.store.driver as? PostgresDriver)
            let secret = "secret-value-\(Int.random(in: 1000...9999))"
            let error = await #expect(throws: PostgresFailure.self) {
                _ = try await driver.query("probe", .request, "SELECT \(secret)::int", as: Int.self)
            }
            for text in [String(describing: error), String(reflecting: error)] {
                #expect(text.contains("probe") && text.contains("22P02") && text.contains("invalid input syntax"), "\(text)")
                #expect(!text.contains(secret), "\(text)")
            }
            // A violated constraint: the DETAIL would quote the row ("Key (…)=(…) already exists").
            try await harness.execute("CREATE TABLE disclosure (v text PRIMARY KEY)")
            let again = await #expect(throws: PostgresFailure.self) {
                try await driver.execute("insert", .request, "INSERT INTO disclosure VALUES (\(secret)), (\(secret))")
            }
            #expect(again?.code == "23505")
            #expect(!String(reflecting: again).contains(secret), "\(String(reflecting: again))")
        }
    }

    /// In an outage every request fails the same way: one log line per interval, with the count
    /// of the ones held back.
    @Test func unavailableLogLinesAreThrottled() {
        let throttle = LogThrottle(interval: .seconds(10))
        let start = ContinuousClock.now
        #expect(throttle.admit(now: start) == 0)
        #expect(throttle.admit(now: start + .seconds(1)) == nil)
        #expect(throttle.admit(now: start + .seconds(9)) == nil)
        #expect(throttle.admit(now: start + .seconds(10)) == 2)
        #expect(throttle.admit(now: start + .seconds(11)) == nil)
    }

    /// `503 UNAVAILABLE` tells the client to come back; which query failed how is for the log.
    @Test func anUnavailableDatabaseNamesNoInternalOperation() {
        let error = ProtocolErrorMiddleware<SyncRequestContext>.protocolError(
            for: StoreUnavailableError("enqueue: no database connection"), retryAfterSeconds: 2
        )
        #expect(error.code == .unavailable)
        #expect(error.message == "the database is unavailable; retry later")
        #expect(error.retryAfterSeconds == 2)
    }
}
