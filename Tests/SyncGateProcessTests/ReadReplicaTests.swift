import Foundation
import NIOHTTP1
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// `SYNCGATE_READ_DATABASE_URL`: a front reading its pulls from a real hot standby
/// (`pg_basebackup -R`, streaming replication) of the test's primary. Replay is paused to make
/// the standby lag on purpose: its answers are older, never wrong — a cursor never goes
/// backwards, a cursor the primary issued never gets `CURSOR_INVALID`, a live device is not left
/// behind — and when the standby goes away the primary answers.
@Suite(.serialized, .timeLimit(.minutes(10))) struct ReadReplicaTests {
    static let secret = HTTPHarness.secret

    /// The admin overview lists the primary's standbys with their state and replay lag.
    @Test func theAdminOverviewShowsEachStandby() async throws {
        let primary = try await TemporaryPostgres.make()
        defer { primary.destroyInBackground() }
        let standby = try await primary.makeStandby()
        defer { standby.destroyInBackground() }
        let migrate = try SyncGateProcess(["migrate"], environment: ["SYNCGATE_DATABASE_URL": primary.location.urlString])
        #expect(await migrate.waitForExit(timeout: hangGuard) == 0, "\(migrate.log)")
        try await StoreHarness.withExisting(.postgres(primary.location)) { harness in
            var replicas: [JSONValue] = []
            try await eventually("the standby streaming") {
                replicas = try await harness.store.overview()["replicas"]?.arrayValue ?? []
                return replicas.first?["state"] == "streaming"
            }
            #expect(replicas.count == 1 && replicas.first?["name"]?.stringValue?.isEmpty == false, "\(replicas)")
        }
    }

    @Test func pullsReadTheStandbyAndNeverGoBackwardsWhileItLags() async throws {
        let primary = try await TemporaryPostgres.make()
        defer { primary.destroyInBackground() }
        let standby = try await primary.makeStandby()
        defer { standby.destroyInBackground() }
        let port = SyncGateProcess.freePort()
        let environment = [
            "SYNCGATE_DATABASE_URL": primary.location.urlString, "SYNCGATE_READ_DATABASE_URL": standby.location.urlString,
            "SYNCGATE_JWT_SECRET": Self.secret, "SYNCGATE_POLL_INTERVAL": "200ms",
        ]
        let serve = try SyncGateProcess(["serve", "--port", "\(port)", "--workers", "1"], environment: environment)
        defer { Task { await serve.stop() } }
        let client = ProcessClient(base: "http://127.0.0.1:\(port)")
        try await client.waitUntilReady(serve)
        let token = try await TokenAuthority(secret: Self.secret).issue(userID: "alice", ttlSeconds: 600)

        func push(_ id: String) async throws {
            let body = ProcessClient.pushBody([Op.create("weightLogs", id, ["kg": 70], key: id)])
            let pushed = try await client.request(.POST, "/v1/sync/push?wait=30000", token: token, device: "phone", body: body)
            #expect(pushed.status == 200 && pushed.json?["status"] == "done", "\(String(describing: pushed.json))")
        }
        func pull(_ cursor: String?, _ parameters: String = "", device: String = "tablet") async throws -> (status: Int, ids: [String], cursor: String?) {
            let query = ["cursor=\(cursor ?? "")", parameters].filter { !$0.isEmpty }.joined(separator: "&")
            let response = try await client.request(.GET, "/v1/sync/pull?\(query)", token: token, device: device)
            let ids = response.json?["changes"]?.arrayValue?.compactMap { $0["entity_id"]?.stringValue } ?? []
            return (response.status, ids, response.json?["cursor"]?.stringValue)
        }
        func served(_ outcome: String) async throws -> Double {
            let metrics = try await client.text("/metrics")
            return ObservabilityProcessTests.value(of: #"syncgate_replica_pulls_total{outcome="\#(outcome)"}"#, in: metrics) ?? 0
        }
        func positions(_ cursor: String?) throws -> [Scope: Int64] {
            try SyncCursor.decode(try #require(cursor), expectedUserID: "alice").positions
        }
        func replay(_ action: String) async throws {
            _ = try await withConnection(standby.location) { try await $0.integer("SELECT 1 FROM pg_wal_replay_\(action)()") }
        }

        // The standby answers once it has replayed the push (the front ran the migrations on the
        // primary; the standby replayed them too).
        try await push("w1")
        var first: String?
        try await eventually("the standby to replay w1") {
            let page = try await pull(nil)
            first = page.cursor
            let replicaServed = try await served("replica")
            return page.status == 200 && page.ids == ["w1"] && replicaServed >= 1
        }
        let afterW1 = try #require(first)

        // Replay paused: the primary moves on, the standby's answers stay where they were.
        try await replay("pause")
        try await push("w2")
        let stale = try await pull(afterW1)
        #expect(stale.status == 200 && stale.ids.isEmpty, "the standby answered \(stale)")
        #expect(try positions(stale.cursor) == (try positions(afterW1)), "a lagging standby's page moved the cursor")

        // A device waiting on the user's feed (for a type nobody pushes, so it stays waiting)
        // lets this front hear of the feed's head from the primary. A pull then answered by the
        // standby would stop short of that head — as a device pulling on an event-stream poke
        // before the standby replayed the change — so the primary answers it.
        let waiting = Task { try await pull(afterW1, "entity_types=contacts&wait=30000", device: "watch") }
        defer { waiting.cancel() }
        let latestBefore = try await served("latest")
        try await eventually("a pull to reach the head the front knows, from the primary") {
            try await pull(afterW1).ids == ["w2"]
        }
        #expect(try await served("latest") > latestBefore)

        // A long-poll woken by the primary's notification reads the change from the primary: its
        // cursor is ahead of the standby, which must not call it invalid; the primary answers.
        let woken = try await pull(afterW1, "wait=10000")
        #expect(woken.status == 200 && woken.ids == ["w2"], "\(woken)")
        let afterW2 = try #require(woken.cursor)
        let behindBefore = try await served("behind")
        let ahead = try await pull(afterW2)
        #expect(ahead.status == 200 && ahead.ids.isEmpty, "a cursor ahead of the standby got \(ahead)")
        #expect(try positions(ahead.cursor) == (try positions(afterW2)))
        #expect(try await served("behind") > behindBefore)

        // Replay resumed: the standby catches up and answers again, w2 included.
        try await replay("resume")
        let replicaBefore = try await served("replica")
        try await eventually("the standby to serve the cursor it was behind") {
            let page = try await pull(afterW2)
            let replicaServed = try await served("replica")
            return page.status == 200 && page.ids.isEmpty && replicaServed > replicaBefore
        }
        #expect(try await pull(afterW1).ids == ["w2"])

        // The standby goes away: pulls keep working from the primary; one warning, not one per pull.
        try await standby.stop()
        let failedBefore = try await served("failed")
        for _ in 0..<3 {
            let page = try await pull(afterW1)
            #expect(page.status == 200 && page.ids == ["w2"], "\(page)")
        }
        #expect(try await served("failed") >= failedBefore + 3)
        #expect(serve.log.components(separatedBy: "a read replica failed").count - 1 == 1, "\(serve.log)")
    }
}
