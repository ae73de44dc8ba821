import Synchronization
import SyncGateCore
import SyncGateWire
import SyncGateStorage
import SyncGateRuntime

/// Feed reads shared by the waiters a change wakes together: when a household's members all wait
/// at the same position, one store read answers all of them; and the reads of different feeds
/// asked for while others are on their way go to the store together, in one call.
///
/// A read that started once the watcher knew head `h` holds every change up to `h` (heads are
/// announced after their changes commit, and a feed's changes commit in sequence order), so it
/// serves any waiter that needs no more than `h`, in flight or for a short while after.
final class SharedFeedReads: Sendable {
    typealias Key = FeedReadRequest

    private struct Entry {
        var read: Task<FeedSlice, any Error>
        /// The head every change of the read is known to include.
        var covers: Int64
        var started: ContinuousClock.Instant
    }

    private let entries = Mutex<[Key: Entry]>([:])
    private let batches: FeedReadBatches

    init(store: any FrontStore) {
        batches = FeedReadBatches(store: store)
    }

    /// The changes of `key.scope` after `key.after`, from a read that includes everything up to
    /// `head` (a committed head the caller learned before calling).
    func read(_ key: Key, covering head: Int64) async throws -> FeedSlice {
        let batches = self.batches
        let read = entries.withLock { entries -> Task<FeedSlice, any Error> in
            if let entry = entries[key], entry.covers >= head { return entry.read }
            let read = Task { try await batches.read(key) }
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

/// Store reads of feeds, batched (``CallBatches``): a read goes at once when fewer than `slots`
/// calls are on their way, and otherwise with the reads asked for meanwhile (`maximumBatch` at
/// most a call: each may bring its limit of rows). So an idle front reads as before, and the ~16
/// waiters one commit of a busy worker wakes cost a store call or two instead of 16 (each call
/// costs a pool lease, a statement's round trip and the tasks around it, whatever it reads).
final class FeedReadBatches: Sendable {
    private let batches: CallBatches<FeedReadRequest, FeedSlice>

    init(store: any FrontStore, slots: Int = 2, maximumBatch: Int = 64) {
        batches = CallBatches(slots: slots, maximumBatch: maximumBatch) { requests in
            let slices = try await store.readFeeds(requests)
            guard slices.count == requests.count else {
                throw StoreUnavailableError("read feeds: \(slices.count) answers to \(requests.count) reads")
            }
            return slices
        }
    }

    func read(_ request: FeedReadRequest) async throws -> FeedSlice {
        try await batches.submit(request)
    }

    /// Reads waiting for a call (tests).
    var waitingCount: Int { batches.waitingCount }
}
