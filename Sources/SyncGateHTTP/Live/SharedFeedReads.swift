import Synchronization
import SyncGateCore
import SyncGateWire
import SyncGateStorage

/// Feed reads shared by the waiters a change wakes together: when a household's members all wait
/// at the same position, one store read answers all of them.
///
/// A read that started once the watcher knew head `h` holds every change up to `h` (heads are
/// announced after their changes commit, and a feed's changes commit in sequence order), so it
/// serves any waiter that needs no more than `h`, in flight or for a short while after.
final class SharedFeedReads: Sendable {
    struct Key: Hashable, Sendable {
        var scope: Scope
        var after: Int64
        var types: Set<String>?
        var limit: Int
    }

    private struct Entry {
        var read: Task<FeedSlice, any Error>
        /// The head every change of the read is known to include.
        var covers: Int64
        var started: ContinuousClock.Instant
    }

    private let store: any FrontStore
    private let entries = Mutex<[Key: Entry]>([:])

    init(store: any FrontStore) {
        self.store = store
    }

    /// The changes of `key.scope` after `key.after`, from a read that includes everything up to
    /// `head` (a committed head the caller learned before calling).
    func read(_ key: Key, covering head: Int64) async throws -> FeedSlice {
        let store = self.store
        let read = entries.withLock { entries -> Task<FeedSlice, any Error> in
            if let entry = entries[key], entry.covers >= head { return entry.read }
            let read = Task { try await store.readFeed(key.scope, after: key.after, types: key.types, limit: key.limit) }
            entries[key] = Entry(read: read, covers: head, started: .now)
            return read
        }
        do {
            return try await read.value
        } catch {
            // A failed read is not shared with later callers.
            entries.withLock { entries in
                if entries[key]?.read == read { entries[key] = nil }
            }
            throw error
        }
    }

    /// Forgets reads started longer than `age` ago (their waiters have moved on).
    func prune(olderThan age: Duration) {
        let cutoff = ContinuousClock.now - age
        entries.withLock { entries in
            entries = entries.filter { $0.value.started >= cutoff }
        }
    }

    var count: Int { entries.withLock { $0.count } }
}
