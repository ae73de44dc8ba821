import AsyncHTTPClient
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import NIOHTTP1
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// Server-sent events over a real socket.
@Suite(.timeLimit(.minutes(10))) struct LiveTests {
    /// Reads an event stream line by line.
    struct EventStream {
        var iterator: HTTPClientResponse.Body.AsyncIterator
        var buffer = ""

        /// The next event, or `nil` when the stream ends or nothing arrives within `timeout`.
        mutating func nextEvent(timeout: Duration) async throws -> String? {
            let deadline = ContinuousClock.now + timeout
            while true {
                if let end = buffer.range(of: "\n\n") {
                    let event = String(buffer[..<end.lowerBound])
                    buffer.removeSubrange(..<end.upperBound)
                    return event
                }
                let remaining = ContinuousClock.now.duration(to: deadline)
                guard remaining > .zero, let chunk = try await Self.next(of: &iterator, within: remaining) else { return nil }
                buffer += String(buffer: chunk)
            }
        }

        /// The iterator's next chunk, abandoned (the response is cancelled) past `timeout`.
        static func next(of iterator: inout HTTPClientResponse.Body.AsyncIterator, within timeout: Duration) async throws -> ByteBuffer? {
            let box = IteratorBox(iterator)
            let chunk = try await withThrowingTaskGroup(of: ByteBuffer?.self) { group in
                group.addTask { try await box.next() }
                group.addTask {
                    try await Task.sleep(for: timeout)
                    return nil
                }
                defer { group.cancelAll() }
                return try await group.next() ?? nil
            }
            iterator = box.iterator
            return chunk
        }
    }

    /// Moves the iterator into a child task and back.
    final class IteratorBox: @unchecked Sendable {
        var iterator: HTTPClientResponse.Body.AsyncIterator
        init(_ iterator: HTTPClientResponse.Body.AsyncIterator) { self.iterator = iterator }
        func next() async throws -> ByteBuffer? { try await iterator.next() }
    }

    static func openEvents(port: Int, token: String) async throws -> (HTTPClientResponse, EventStream) {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/sync/events")
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "X-Device-Id", value: "watcher")
        // AsyncHTTPClient's deadline covers the whole stream: longer than any test reads one.
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(600))
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
            #expect(try await events.nextEvent(timeout: hangGuard)?.hasPrefix(": connected") == true)

            // Quiet: a keep-alive comment.
            #expect(try await events.nextEvent(timeout: hangGuard) == ": keep-alive")

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

    /// The next `poke` event's data, skipping keep-alives; `nil` if none comes within `timeout`.
    static func nextPoke(_ events: inout EventStream, timeout: Duration = hangGuard) async throws -> JSONValue? {
        while let event = try await events.nextEvent(timeout: timeout) {
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

    /// A long-poll waits no longer than its token is valid, as an event stream lives no longer:
    /// with 5 s left on the token, a 60 s wait answers (an empty page) when the token expires,
    /// not with changes committed after it.
    @Test(arguments: Driver.selected)
    func aLongPollEndsWhenItsTokenExpires(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, setup: .live, workers: 1) { http in
            _ = try await http.results([Op.create("weightLogs", "w1", ["kg": 70])])
            let cursor = try await http.pullAll().cursor
            var headers = try await http.headers()
            headers[.authorization] = "Bearer \(try await http.token("alice", ttl: 5))"
            let started = ContinuousClock.now
            let answer = try await http.send(.get, "/v1/sync/pull?cursor=\(cursor)&wait=60000", headers: headers)
            #expect(answer.status == 200 && answer.json?["changes"] == [])
            // Far below the wait asked for, far above the token's 5 s on a busy machine.
            #expect(started.duration(to: .now) < .seconds(40))
        }
    }
}
