import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import Testing
import SyncGateConcurrency

/// The database goes away mid-traffic and comes back: clients get 503 UNAVAILABLE with
/// Retry-After, /readyz fails, everything recovers by itself, and no accepted push is lost.
@Suite(.serialized, .timeLimit(.minutes(10))) struct OutageTests {
    @Test func aDatabaseRestartMidTrafficLosesNothing() async throws {
        let server = try await TemporaryPostgres.make()
        defer { server.destroyInBackground() }
        let url = DatabaseURL.postgres(server.location)
        // A request's deadline far above what a loaded machine takes to answer a 503 from what it
        // knows, so that a request that waited for a connection shows (the server's is 5 s).
        let deadline = Duration.seconds(60)
        try await StoreHarness.withExisting(url, productionDeadlines: true, requestDeadline: deadline) { harness in
            try await HTTPHarness.run(store: harness, workers: 2) { http in
                let accepted = Locked<[String: String]>([:])  // entity id → job id
                let outageSeen = Locked(false)
                let stopPushing = Locked(false)

                // A device pushing steadily, retrying what is refused, as a client would.
                let pusher = Task {
                    var index = 0
                    while !stopPushing.value {
                        let id = "w\(index)"
                        let response = try await http.push([Op.create("weightLogs", id, ["kg": .int(Int64(index))], key: id)], wait: 0)
                        switch response.status {
                        case 202, 200:
                            accepted.update { $0[id] = response.json?["job_id"]?.stringValue }
                            index += 1
                        case 503:
                            #expect(response.json?.errorCode == "UNAVAILABLE")
                            #expect(response.json?["error"]?["retryable"] == true)
                            #expect(response.headers[.retryAfter] != nil)
                            outageSeen.update { $0 = true }
                            try await Task.sleep(for: .milliseconds(100))
                        default:
                            Issue.record("unexpected \(response.status): \(String(describing: response.json))")
                        }
                        try await Task.sleep(for: .milliseconds(20))
                    }
                }
                let clock = ContinuousClock.now
                func phase(_ name: String) { print("outage: \(name) at \(ContinuousClock.now - clock)") }
                try await eventually("pushes accepted before the outage") { accepted.value.count >= 5 }
                try await server.stop()
                phase("database stopped")
                // While it is down: pushes and pulls get 503, readiness fails, health does not.
                try await eventually("an UNAVAILABLE push") { outageSeen.value }
                // Once the process knows the database refuses connections, a request does not
                // wait out its deadline for a connection that cannot come: it answers in
                // milliseconds (seconds on a loaded machine), not after the deadline.
                let asked = ContinuousClock.now
                let pull = try await http.pull()
                #expect(pull.status == 503 && pull.json?.errorCode == "UNAVAILABLE")
                #expect(asked.duration(to: .now) < deadline / 2, "a 503 took \(asked.duration(to: .now)) (deadline \(deadline))")
                #expect(try await http.send(.get, "/readyz", headers: [:]).status == 503)
                #expect(try await http.send(.get, "/healthz", headers: [:]).status == 200)
                try await server.start()
                phase("database started")
                try await eventually("readiness to recover") {
                    (try? await http.send(.get, "/readyz", headers: [:]).status) == 200
                }
                phase("ready again")
                let before = accepted.value.count
                try await eventually("pushes to be accepted again") { accepted.value.count > before + 5 }
                stopPushing.update { $0 = true }
                try await pusher.value
                phase("pushes accepted again")

                // Every push that was answered 200/202 is applied, exactly once.
                let ids = accepted.value
                for jobID in Set(ids.values) {
                    let job = try await harness.waitFinished(Int64(jobID)!)
                    #expect(try job.state == .done && job.decodedResults()?.first?.outcome == "applied")
                }
                phase("every accepted job finished")
                let changes = try await harness.pullAll().changes
                #expect(Set(changes.map(\.entityID)) == Set(ids.keys))
                #expect(changes.count == ids.count)
                #expect(changes.allSatisfy { $0.version == 1 })
            }
        }
    }
}
