package import AsyncHTTPClient
import Synchronization

/// HTTP clients that connect a receiver's host to the address its SSRF check passed, through
/// AsyncHTTPClient's `dnsOverride` (which keeps the TLS name and certificate check on the host):
/// a DNS answer that changes after the check (DNS rebinding) is never connected to. One client,
/// with its own connection pool, per (host, address); at most `capacity`, the least recently
/// used retired first and shut down once its attempts are over (`retireAfter`).
package final class PinnedClients: Sendable {
    struct Pin: Hashable {
        var host: String
        var address: String
    }

    let configuration: HTTPClient.Configuration
    let capacity: Int
    let retireAfter: Duration
    /// Clients by pin, and the pins from least to most recently used.
    private let state = Mutex<(clients: [Pin: HTTPClient], order: [Pin])>(([:], []))
    /// Retired clients' shutdowns under way, by number: each removes itself when done.
    private let retiring = Mutex<(next: Int, tasks: [Int: Task<Void, Never>])>((0, [:]))

    package init(configuration: HTTPClient.Configuration, capacity: Int = 64, retireAfter: Duration) {
        self.configuration = configuration
        self.capacity = max(1, capacity)
        self.retireAfter = retireAfter
    }

    /// The client that connects `host` to `address` (an IP address's text).
    package func client(host: String, address: String) -> HTTPClient {
        let pin = Pin(host: host, address: address)
        let (client, retired) = state.withLock { state -> (HTTPClient, HTTPClient?) in
            if let client = state.clients[pin] {
                state.order.removeAll { $0 == pin }
                state.order.append(pin)
                return (client, nil)
            }
            var settings = configuration
            settings.dnsOverride = [host: address]
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: settings)
            var retired: HTTPClient?
            if state.clients.count >= capacity, let oldest = state.order.first {
                state.order.removeFirst()
                retired = state.clients.removeValue(forKey: oldest)
            }
            state.clients[pin] = client
            state.order.append(pin)
            return (client, retired)
        }
        if let retired {
            let delay = retireAfter
            retiring.withLock { retiring in
                let number = retiring.next
                retiring.next += 1
                retiring.tasks[number] = Task { [retired] in
                    try? await Task.sleep(for: delay)
                    try? await retired.shutdown()
                    _ = self.retiring.withLock { $0.tasks.removeValue(forKey: number) }
                }
            }
        }
        return client
    }

    /// How many clients are kept.
    package var count: Int { state.withLock { $0.clients.count } }

    /// How many retired clients are still to be shut down.
    package var retiringCount: Int { retiring.withLock { $0.tasks.count } }

    /// Shuts every client down, retired ones at once.
    package func shutdown() async {
        let clients = state.withLock { state -> [HTTPClient] in
            defer { state.clients = [:]; state.order = [] }
            return Array(state.clients.values)
        }
        let tasks = retiring.withLock { Array($0.tasks.values) }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
        for client in clients { try? await client.shutdown() }
    }
}
