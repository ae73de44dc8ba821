import Foundation
import HummingbirdTesting
import SyncGateClient
import SyncGateTestSupport
import Testing

/// The default transport against the real front: answers, cancellation at any moment of an
/// exchange, and no answer kept in a cache.
@Suite("URLSession transport", .timeLimit(.minutes(10)))
struct URLSessionTransportTests {
    @Test("requests cancelled at every moment around their answer return CancellationError or the answer, and the process survives")
    func cancellationAnyTime() async throws {
        try await HTTPHarness.with(.sqlite, setup: .live) { http in
            let port = try #require(http.client.port)
            let transport = URLSessionTransport(baseURL: URL(string: "http://127.0.0.1:\(port)")!)
            let request = TransportRequest(method: "GET", path: "/healthz", timeout: .seconds(30))
            var answered = 0
            var cancelled = 0
            // FoundationNetworking trapped when a task was cancelled as it completed; cancelling
            // after 0–2 ms, around the answer's arrival, hits that moment many times over.
            for round in 0..<400 {
                let exchange = Task { try await transport.send(request) }
                if round % 4 != 0 { try await Task.sleep(for: .microseconds((round * 37) % 2000)) }
                exchange.cancel()
                do {
                    let answer = try await exchange.value
                    #expect(answer.status == 200)
                    answered += 1
                } catch is CancellationError {
                    cancelled += 1
                }
            }
            #expect(answered + cancelled == 400)
            #expect(cancelled > 0)
            // The transport still works.
            #expect(try await transport.send(request).status == 200)
        }
    }

    @Test("event streams cancelled at every moment around their head and first chunks end cleanly")
    func streamCancellationAnyTime() async throws {
        try await HTTPHarness.with(.sqlite, setup: .live) { http in
            let port = try #require(http.client.port)
            let transport = URLSessionTransport(baseURL: URL(string: "http://127.0.0.1:\(port)")!)
            let token = try await http.token("alice")
            let request = TransportRequest(
                method: "GET", path: "/v1/sync/events", headers: ["authorization": "Bearer \(token)", "x-device-id": "d1"], timeout: .seconds(30)
            )
            var opened = 0
            for round in 0..<200 {
                let reader = Task { () -> Int in
                    let stream = try await transport.stream(request)
                    var chunks = 0
                    for try await _ in stream.body {
                        chunks += 1
                    }
                    return stream.status + chunks
                }
                if round % 4 != 0 { try await Task.sleep(for: .microseconds((round * 53) % 3000)) }
                reader.cancel()
                if (try? await reader.value) != nil { opened += 1 }
            }
            // A stream still opens and brings the server's first event (once the server has seen
            // the cancelled ones close: it counts a user's live connections).
            var first: [UInt8]?
            try await eventually("an event stream to open again", every: .milliseconds(200)) {
                let stream = try await transport.stream(request)
                guard stream.status == 200 else { return false }
                var iterator = stream.body.makeAsyncIterator()
                first = try await iterator.next()
                return true
            }
            #expect(first?.isEmpty == false)
            _ = opened
        }
    }
}
