#if canImport(Darwin)
import os
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A value shared between tasks behind a lock.
///
/// Written by hand: `Mutex` needs iOS 18 / macOS 15, and NIOConcurrencyHelpers would bring SwiftNIO
/// into every app. It is an `os_unfair_lock` on Apple platforms and a `pthread_mutex_t` elsewhere.
public final class Locked<Value: Sendable>: @unchecked Sendable {
    #if canImport(Darwin)
    private let lock: UnsafeMutablePointer<os_unfair_lock> = .allocate(capacity: 1)
    #else
    private let lock: UnsafeMutablePointer<pthread_mutex_t> = .allocate(capacity: 1)
    #endif
    // Only read or written with `lock` held.
    private var stored: Value

    public init(_ value: Value) {
        stored = value
        #if canImport(Darwin)
        lock.initialize(to: os_unfair_lock())
        #else
        lock.initialize(to: pthread_mutex_t())
        pthread_mutex_init(lock, nil)
        #endif
    }

    deinit {
        #if !canImport(Darwin)
        pthread_mutex_destroy(lock)
        #endif
        lock.deinitialize(count: 1)
        lock.deallocate()
    }

    /// The value now.
    public var value: Value { update { $0 } }

    /// Runs `body` with the value, holding the lock; `body` must not suspend or take this lock again.
    @discardableResult
    public func update<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        #if canImport(Darwin)
        os_unfair_lock_lock(lock)
        defer { os_unfair_lock_unlock(lock) }
        #else
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        #endif
        return try body(&stored)
    }
}
