import Logging
import SyncGateConcurrency
import SyncGateCore
import SyncGateServer
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// A front reading pulls from standbys: how it reports one that fails.
@Suite(.timeLimit(.minutes(10))) struct ReplicatedFrontStoreTests {
    @Test(arguments: Driver.selected)
    func aFailingReplicaIsReportedOncePerOutageNotOncePerRest(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let lines = Locked<[String]>([])
            var logger = Logger(label: "syncgate") { label in JSONLogHandler(label: label, write: { line in lines.update { $0.append(line) } }) }
            logger.logLevel = .info
            let replica = CountingFrontStore(harness.store)
            // No rest at all: every pull tries the standby again, as after any rest on a slow machine.
            let store = ReplicatedFrontStore(primary: harness.store, replicas: [replica], restAfterFailure: .zero, logger: logger)
            func count(_ message: String) -> Int { lines.value.filter { $0.contains(message) }.count }
            let query = PullQuery(userID: "alice", deviceID: "d1", cursor: nil, limit: 10)

            replica.failPulls(true)
            for _ in 0..<3 { #expect(try await store.pull(query).changes.isEmpty) }
            #expect(replica.count("pull") == 3)
            #expect(count("a read replica failed") == 1)

            // It answers again: said once; a new outage is a new warning.
            replica.failPulls(false)
            _ = try await store.pull(query)
            _ = try await store.pull(query)
            #expect(count("a read replica answers again") == 1)
            replica.failPulls(true)
            _ = try await store.pull(query)
            #expect(count("a read replica failed") == 2)
        }
    }
}
