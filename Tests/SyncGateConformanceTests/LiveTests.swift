import AsyncHTTPClient
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import NIOHTTP1
import SyncGateCore
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// Server-sent events over a real socket.
@Suite struct LiveTests {
    /// Reads an event stream line by line.
    struct EventStream {
        var iterator: HTTPClientResponse.Body.AsyncIterator
        var buffer = ""

        mutating func nextEvent(timeout: Duration) async throws -> String? {
            let deadline = ContinuousClock.now + timeout
            while true {
                if let end = buffer.range(of: "\n\n") {
                    let event = String(buffer[..<end.lowerBound])
                    buffer.removeSubrange(..<end.upperBound)
                    return event
                }
                guard ContinuousClock.now < deadline, let chunk = try await iterator.next() else { return nil }
                buffer += String(buffer: chunk)
            }
        }
    }

    static func openEvents(port: Int, token: String) async throws -> (HTTPClientResponse, EventStream) {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/sync/events")
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "X-Device-Id", value: "watcher")
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
        return (response, EventStream(iterator: response.body.makeAsyncIterator()))
    }

    @Test(arguments: Driver.selected)
    func eventsPokeOnFeedsTheCallerReadsAndKeepAlive(_ driver: Driver) async throws {
        var configuration = HTTPHarness.testConfiguration
        configuration.keepAliveInterval = .milliseconds(400)
        try await HTTPHarness.with(driver, setup: .live, configuration: configuration) { http in
            let port = try #require(http.client.port)
            _ = try await http.results([Op.create("households", "home", ["name": "Home"])], user: "bob")
            let (response, stream) = try await Self.openEvents(port: port, token: try await http.token("alice"))
            var events = stream
            #expect(response.status == .ok)
            #expect(response.headers.first(name: "content-type") == "text/event-stream")
            #expect(try await events.nextEvent(timeout: .seconds(5))?.hasPrefix(": connected") == true)

            // Quiet: a keep-alive comment.
            #expect(try await events.nextEvent(timeout: .seconds(5)) == ": keep-alive")

            // Another device of alice pushes: a poke for her own feed.
            _ = try await http.results([Op.create("weightLogs", "w", ["kg": 1])], device: "phone")
            let own = try await Self.nextPoke(&events)
            #expect(own == ["household_ids": [], "user": true])

            // Bob's private data is not alice's business.
            _ = try await http.results([Op.create("weightLogs", "b", ["kg": 1])], user: "bob")
            // Bob adds alice to his household: her own feed pokes (membership), then the household's.
            _ = try await http.results([HouseholdTests.member("home", "alice")], user: "bob")
            let joined = try await Self.nextPoke(&events)
            #expect(joined?["household_ids"] == ["home"])
            _ = try await http.results([Op.create("inventory", "milk", ["qty": 1], household: "home")], user: "bob")
            let shared = try await Self.nextPoke(&events)
            #expect(shared == ["household_ids": ["home"], "user": false])
        }
    }

    /// The next `poke` event's data, skipping keep-alives.
    static func nextPoke(_ events: inout EventStream) async throws -> JSONValue? {
        while let event = try await events.nextEvent(timeout: .seconds(10)) {
            guard event.hasPrefix("event: poke") else { continue }
            let data = event.split(separator: "\n").first { $0.hasPrefix("data: ") }.map { String($0.dropFirst(6)) } ?? ""
            return try JSONParser().parse(data)
        }
        return nil
    }

    @Test(arguments: Driver.selected)
    func eventsNeedAuthenticationAndADevice(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 0) { http in
            let unauthenticated = try await http.send(.get, "/v1/sync/events", headers: [:])
            #expect(unauthenticated.status == 401)
            let noDevice = try await http.send(.get, "/v1/sync/events", headers: try await http.headers(device: nil))
            #expect(noDevice.status == 400)
            let unknownParameter = try await http.send(.get, "/v1/sync/events?x=1", headers: try await http.headers())
            #expect(unknownParameter.status == 400)
        }
    }
}
