package import Synchronization

/// Where one task waits for news: deliveries accumulate in a `Pending` value until the task
/// takes them, and a wait ends on a delivery, at its deadline, when the mailbox closes or when
/// the waiting task is cancelled. A store subscription (``ChangeSubscription``) and a live
/// connection's wake-ups are each one of these.
///
/// Written by hand because none of the mirrors' primitives waits with a deadline cheaply enough
/// for a front holding 16,000 idle connections: an `AsyncStream` or `AsyncChannel` wait raced
/// against a sleep costs a child task and a timer per wait; here the deadline is one
/// ``EventLoopTimer`` entry, cancelled in O(1) when a delivery comes first.
///
/// Inlinable, so a module that uses it (a live connection's wake-ups, in the HTTP front) gets it
/// specialized for its `Pending` rather than through generic metadata on every call.
package final class Mailbox<Pending: Sendable>: Sendable {
    package enum Outcome: Sendable {
        /// Everything delivered since the last wait took it.
        case delivered(Pending)
        case timedOut
        /// The mailbox is closed (or the waiting task was cancelled): a loop over it ends.
        case closed
    }

    @usableFromInline
    struct State {
        @usableFromInline var pending: Pending?
        @usableFromInline var waiter: CheckedContinuation<Void, Never>?
        /// The waiter's deadline, cancelled when something else ends the wait first.
        @usableFromInline var timer: EventLoopTimer.Timer?
        /// Counts the waits, so a timer ends only the wait it was set for.
        @usableFromInline var wait = 0
        @usableFromInline var closed = false

        @inlinable init() {}

        @inlinable mutating func takeWaiter() -> Waiter? {
            defer {
                waiter = nil
                timer = nil
            }
            return waiter.map { Waiter(continuation: $0, timer: timer) }
        }

        /// What a wait answers now, if it need not sleep: closed first (a closing process
        /// stops waiting, whatever came), then the deliveries.
        @inlinable mutating func take() -> Outcome? {
            if closed { return .closed }
            guard let delivered = pending else { return nil }
            pending = nil
            return .delivered(delivered)
        }
    }

    /// A waiter taken out of the state, resumed outside the lock.
    @usableFromInline
    struct Waiter {
        @usableFromInline var continuation: CheckedContinuation<Void, Never>
        @usableFromInline var timer: EventLoopTimer.Timer?

        @inlinable init(continuation: CheckedContinuation<Void, Never>, timer: EventLoopTimer.Timer?) {
            self.continuation = continuation
            self.timer = timer
        }

        @inlinable func resume() {
            timer?.cancel()
            continuation.resume()
        }
    }

    @usableFromInline let state: Mutex<State>
    @usableFromInline let timers: EventLoopTimer

    @inlinable package init(timers: EventLoopTimer = .shared) {
        self.state = Mutex(State())
        self.timers = timers
    }

    /// Folds a delivery into the pending value (`merge` runs under the mailbox's lock: keep it
    /// short) and ends the current wait. Once closed, deliveries are dropped.
    @inlinable package func deliver(_ merge: @Sendable (inout Pending?) -> Void) {
        let waiter = state.withLock { state -> Waiter? in
            guard !state.closed else { return nil }
            merge(&state.pending)
            guard state.pending != nil else { return nil }
            return state.takeWaiter()
        }
        waiter?.resume()
    }

    /// Ends the current wait and every later one with ``Outcome/closed`` (idempotent).
    @inlinable package func close() {
        let waiter = state.withLock { state -> Waiter? in
            state.closed = true
            state.pending = nil
            return state.takeWaiter()
        }
        waiter?.resume()
    }

    @inlinable package var isClosed: Bool { state.withLock { $0.closed } }

    /// Whether a wait is asleep now (for tests that act on a sleeping waiter).
    package var hasSleepingWaiter: Bool { state.withLock { $0.waiter != nil } }

    /// Takes what was delivered, waiting for it until `deadline` if nothing was. One task waits
    /// at a time.
    @inlinable package func wait(until deadline: ContinuousClock.Instant) async -> Outcome {
        if let outcome = state.withLock({ $0.take() }) { return outcome }
        if Task.isCancelled { return .closed }
        await sleep(until: deadline)
        return state.withLock { $0.take() } ?? (Task.isCancelled ? .closed : .timedOut)
    }

    /// Returns on a delivery, on close, at `deadline` or when the task is cancelled.
    @inlinable func sleep(until deadline: ContinuousClock.Instant) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let wait = state.withLock { state -> Int? in
                    if state.pending != nil || state.closed || Task.isCancelled { return nil }
                    state.waiter = continuation
                    state.wait += 1
                    return state.wait
                }
                guard let wait else {
                    continuation.resume()
                    return
                }
                // The timer ends this wait only: a later one has a timer of its own.
                let timer = timers.after(ContinuousClock.now.duration(to: deadline)) { [weak self] in self?.endWait(wait) }
                let stale = state.withLock { state -> Bool in
                    guard state.waiter != nil, state.wait == wait else { return true }
                    state.timer = timer
                    return false
                }
                if stale { timer.cancel() }
            }
        } onCancel: {
            endWait(nil)
        }
    }

    /// Ends the current wait (only if it is still wait number `wait`, when given).
    @inlinable func endWait(_ wait: Int?) {
        let waiter = state.withLock { state -> Waiter? in
            if let wait, state.wait != wait { return nil }
            return state.takeWaiter()
        }
        waiter?.resume()
    }
}
