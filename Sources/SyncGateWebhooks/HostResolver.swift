import NIOPosix
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The addresses a host name resolves to, for the SSRF check. Written by hand because NIO's
/// resolver is internal to its bootstraps. getaddrinfo blocks (up to tens of seconds when a
/// name server does not answer), so it runs on threads of its own, as many as a process has
/// attempts in flight by default: a receiver whose names do not resolve never holds up another's
/// look-ups or NIO's shared thread pool.
package enum HostResolver {
    private static let threads: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: WebhookConfiguration().concurrency)
        pool.start()
        return pool
    }()

    /// Look-ups of one host share one thread: a name server that does not answer holds one
    /// thread per host, however many attempts give up on it and come back.
    private static let shared = CoalescedLookups { host in try await threads.runIfActive { try resolve(host) } }

    package static func addresses(of host: String) async throws -> [[UInt8]] {
        try await shared.addresses(of: host)
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func resolve(_ host: String) throws -> [[UInt8]] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if canImport(Glibc)
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
        hints.ai_socktype = SOCK_STREAM
        #endif
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, nil, &hints, &list)
        guard status == 0, let first = list else { throw Failure(description: String(cString: gai_strerror(status))) }
        defer { freeaddrinfo(first) }
        var addresses: [[UInt8]] = []
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let info = next {
            if let address = info.pointee.ai_addr {
                switch Int32(address.pointee.sa_family) {
                case AF_INET:
                    address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                        addresses.append(withUnsafeBytes(of: v4.pointee.sin_addr) { Array($0) })
                    }
                case AF_INET6:
                    address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                        addresses.append(withUnsafeBytes(of: v6.pointee.sin6_addr) { Array($0) })
                    }
                default: break
                }
            }
            next = info.pointee.ai_next
        }
        return addresses
    }
}

/// Concurrent look-ups of the same host made once: callers while one is under way wait for its
/// answer (each may stop waiting; the look-up goes on and ends for the others).
package final class CoalescedLookups: Sendable {
    private let resolve: @Sendable (String) async throws -> [[UInt8]]
    private let underWay = Mutex<[String: Task<[[UInt8]], any Error>]>([:])

    package init(resolve: @escaping @Sendable (String) async throws -> [[UInt8]]) {
        self.resolve = resolve
    }

    package func addresses(of host: String) async throws -> [[UInt8]] {
        let task = underWay.withLock { underWay in
            if let task = underWay[host] { return task }
            let task = Task { [resolve] in
                defer { _ = self.underWay.withLock { $0.removeValue(forKey: host) } }
                return try await resolve(host)
            }
            underWay[host] = task
            return task
        }
        return try await task.value
    }

    /// Hosts being looked up now.
    package var count: Int { underWay.withLock { $0.count } }
}
