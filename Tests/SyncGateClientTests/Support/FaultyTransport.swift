import Foundation
import Synchronization
import SyncGateClient

/// A transport in front of the real one that injects the faults of a mobile network, from a
/// seeded generator: answers lost after the server acted on the request, requests sent twice,
/// delays, and offline periods. Fault injection lives here, in test code, not in the library.
///
/// It also keeps every push it forwarded (idempotency key → operation), so a test can tell
/// what the server was asked, whatever the client heard back.
final class FaultyTransport: SyncTransport {
    struct Rates: Sendable {
        /// Forward the request, then lose the answer.
        var dropAnswer = 0.0
        /// Forward the request twice; answer with the second.
        var sendTwice = 0.0
        /// Wait up to 20 ms before forwarding.
        var delay = 0.0

        static let none = Rates()
    }

    /// The error of a request that never reached the server or whose answer was lost.
    struct InjectedFailure: Error, CustomStringConvertible {
        var description: String
    }

    private struct State {
        var random: SplitMix64
        var rates: Rates
        var offline = false
        var pushed: [String: JSONValue] = [:]
        var faults: [String: Int] = [:]
        var requests: [String: Int] = [:]
        var inFlight = 0
    }

    private let base: any SyncTransport
    private let state: Mutex<State>

    init(base: any SyncTransport, seed: UInt64, rates: Rates) {
        self.base = base
        state = Mutex(State(random: SplitMix64(seed: seed), rates: rates))
    }

    var offline: Bool {
        get { state.withLock { $0.offline } }
        set { state.withLock { $0.offline = newValue } }
    }

    var rates: Rates {
        get { state.withLock { $0.rates } }
        set { state.withLock { $0.rates = newValue } }
    }

    /// Every operation forwarded to the server, by idempotency key (the last copy sent).
    var pushedOperations: [String: JSONValue] { state.withLock { $0.pushed } }

    /// How many faults of each kind were injected.
    var faults: [String: Int] { state.withLock { $0.faults } }

    /// Requests sent to the server and not yet answered, including those whose caller gave up.
    var inFlight: Int { state.withLock { $0.inFlight } }

    /// Requests forwarded, by kind: `push`, `job`, `pull`, `long-poll`, `events`.
    var requests: [String: Int] { state.withLock { $0.requests } }

    private func countRequest(_ request: TransportRequest) {
        let kind: String
        if request.path.hasPrefix("/v1/sync/push") {
            kind = "push"
        } else if request.path.hasPrefix("/v1/jobs") {
            kind = "job"
        } else if request.path.hasPrefix("/v1/sync/pull") {
            kind = request.path.contains("wait=") ? "long-poll" : "pull"
        } else {
            kind = "events"
        }
        state.withLock { $0.requests[kind, default: 0] += 1 }
    }

    private enum Fault { case none, dropAnswer, sendTwice, delay(Duration) }

    private func decide() -> (offline: Bool, fault: Fault) {
        state.withLock { state in
            if state.offline { return (true, .none) }
            let roll = Double.random(in: 0..<1, using: &state.random)
            let rates = state.rates
            let fault: Fault
            if roll < rates.dropAnswer {
                fault = .dropAnswer
            } else if roll < rates.dropAnswer + rates.sendTwice {
                fault = .sendTwice
            } else if roll < rates.dropAnswer + rates.sendTwice + rates.delay {
                fault = .delay(.milliseconds(Int.random(in: 1...20, using: &state.random)))
            } else {
                fault = .none
            }
            return (false, fault)
        }
    }

    private func count(_ fault: String) {
        state.withLock { $0.faults[fault, default: 0] += 1 }
    }

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        let (offline, fault) = decide()
        if offline {
            count("offline")
            throw InjectedFailure(description: "offline")
        }
        countRequest(request)
        if request.path.hasPrefix("/v1/sync/push"), let body = request.body, let operations = try? JSONValue(parsing: body)["operations"]?.arrayValue {
            state.withLock { state in
                for operation in operations {
                    if let key = operation["idempotency_key"]?.stringValue { state.pushed[key] = operation }
                }
            }
        }
        switch fault {
        case .none:
            return try await forward(request)
        case .dropAnswer:
            count("dropAnswer")
            _ = try await forward(request)
            throw InjectedFailure(description: "answer lost")
        case .sendTwice:
            count("sendTwice")
            _ = try? await forward(request)
            return try await forward(request)
        case .delay(let duration):
            count("delay")
            try await Task.sleep(for: duration)
            return try await forward(request)
        }
    }

    /// Sends a request as a network does: once sent, it reaches the server whether or not its
    /// caller still waits (a cancelled caller returns at once). ``inFlight`` counts it until the
    /// server has answered.
    private func forward(_ request: TransportRequest) async throws -> TransportResponse {
        state.withLock { $0.inFlight += 1 }
        let (answer, delivered) = AsyncThrowingStream.makeStream(of: TransportResponse.self)
        Task { [base, transport = self] in
            do {
                delivered.yield(try await base.send(request))
                delivered.finish()
            } catch {
                delivered.finish(throwing: error)
            }
            transport.finished()
        }
        for try await response in answer { return response }
        throw CancellationError()
    }

    private func finished() {
        state.withLock { $0.inFlight -= 1 }
    }

    func stream(_ request: TransportRequest) async throws -> TransportStream {
        if offline {
            count("offline")
            throw InjectedFailure(description: "offline")
        }
        countRequest(request)
        return try await base.stream(request)
    }
}

/// A transport whose event streams always fail: live sync must fall back to long-poll.
struct NoEventStreamTransport: SyncTransport {
    let base: any SyncTransport

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        try await base.send(request)
    }

    func stream(_ request: TransportRequest) async throws -> TransportStream {
        throw FaultyTransport.InjectedFailure(description: "no event streams here")
    }
}

/// A transport that calls `probe` with each request before sending it: tests read the client's
/// status at that moment.
struct ProbeTransport: SyncTransport {
    let base: any SyncTransport
    let probe: @Sendable (TransportRequest) -> Void

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        probe(request)
        return try await base.send(request)
    }

    func stream(_ request: TransportRequest) async throws -> TransportStream {
        probe(request)
        return try await base.stream(request)
    }
}
