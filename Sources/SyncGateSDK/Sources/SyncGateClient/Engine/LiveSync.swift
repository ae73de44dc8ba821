import SyncGateWire
import Logging
import SyncGateConcurrency

/// Live sync: a cycle whenever the server pokes (server-sent events) or, while the event stream
/// is down, whenever a long-poll returns; and whenever the app writes. Failures back off with
/// jitter, never sooner than the server's `Retry-After`.
final class LiveSync: Sendable {
    let engine: SyncEngine
    let wakeup: Wakeup
    /// Where the event stream stands.
    private let streamState: Locked<StreamState>

    /// The event stream: opening (wait for it), open (pokes arrive), or down (long-poll instead).
    enum StreamState {
        case connecting
        case open
        case down
    }

    init(engine: SyncEngine, wakeup: Wakeup) {
        self.engine = engine
        self.wakeup = wakeup
        let initial: StreamState = engine.configuration.live.mode == .serverSentEvents ? .connecting : .down
        streamState = Locked(initial)
    }

    private var stream: StreamState {
        get { streamState.value }
        set { streamState.update { $0 = newValue } }
    }

    private var options: SyncClient.LiveOptions { engine.configuration.live }

    /// Runs until the task is cancelled.
    func run() async {
        await withTaskGroup(of: Void.self) { group in
            if options.mode == .serverSentEvents {
                group.addTask { await self.listen() }
            }
            group.addTask { await self.cycle() }
            await group.next()
            group.cancelAll()
        }
    }

    private func cycle() async {
        var failures = 0
        var stuck = 0
        while !Task.isCancelled {
            wakeup.reset()
            do {
                let report = try await engine.sync()
                failures = 0
                if report.pending > 0 {
                    // Writes wait for a retryable failure or an unfinished job: try again after a
                    // delay that grows while they stay, or sooner if something happens.
                    stuck += 1
                    await wakeup.wait(timeout: engine.configuration.backoff.delay(afterFailures: stuck))
                    continue
                }
                stuck = 0
                try await waitForNews()
            } catch {
                // Only this task's own cancellation ends it: a `CancellationError` from elsewhere
                // (a token provider awaiting a task someone cancelled) is a failure like any other.
                if Task.isCancelled { return }
                failures += 1
                let clientError = error as? SyncGateClientError ?? SyncGateClientError(.transport, "\(error)")
                let delay = engine.configuration.backoff.delay(afterFailures: failures, retryAfter: clientError.retryAfter)
                engine.logger.warning("live sync failed; retrying", metadata: ["syncgate.error": "\(clientError)", "syncgate.retry_in": "\(delay)"])
                engine.events.emit(.liveSyncFailed(clientError, retryIn: delay))
                do { try await Task.sleep(for: delay) } catch { return }
            }
        }
    }

    /// Waits for a poke, a write or a change of the event stream; long-polls while it is down.
    private func waitForNews() async throws {
        switch stream {
        case .open:
            await wakeup.wait(timeout: options.safetyInterval)
            return
        case .connecting:
            // The stream signals once it opens or fails.
            await wakeup.wait(timeout: engine.configuration.requestTimeout)
            return
        case .down:
            break
        }
        // Long-poll, but stop as soon as a write (or an event stream coming up) needs a cycle.
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                // At least a second: a wait of zero is answered at once, and this would spin.
                let wait = max(self.options.longPollWait, .seconds(1))
                while !(try await self.engine.waitForChanges(wait: wait)) {}
            }
            group.addTask { await self.wakeup.wait() }
            try await group.next()
            group.cancelAll()
        }
    }

    /// Keeps an event stream open and turns its pokes into wake-ups.
    private func listen() async {
        var failures = 0
        while !Task.isCancelled {
            // A refusal's `Retry-After` (429 at the server's live-connection cap, 503): never sooner.
            var retryAfter: Duration?
            let activity = LastActivity()
            do {
                let events = try await engine.api.events(idleTimeout: options.eventStreamIdleTimeout)
                stream = .open
                // Changes may have happened while no stream was open.
                wakeup.signal()
                try await read(events, activity: activity)
                // Ended before it was heard (a captive portal, a proxy that answers 200 and closes,
                // a server that closes after its opening lines): a failure, or it would be
                // reopened, and the state synced, without end.
                failures = activity.heard ? 0 : failures + 1
            } catch {
                failures = activity.heard ? 1 : failures + 1
                retryAfter = (error as? SyncGateClientError)?.retryAfter
            }
            stream = .down
            if Task.isCancelled { return }
            // Long-poll takes over while the stream is down.
            wakeup.signal()
            // Never sooner than the stream's `retry:` (SyncGate says 3 s), up to a minute.
            let delay = engine.configuration.backoff.delay(afterFailures: max(failures, 1), retryAfter: retryAfter)
            do {
                try await Task.sleep(for: max(delay, min(activity.retry ?? .zero, .seconds(60))))
            } catch {
                return
            }
            stream = .connecting
        }
    }

    /// Reads pokes until the stream ends, fails or stays silent past the idle timeout.
    private func read(_ stream: TransportStream, activity lastActivity: LastActivity) async throws {
        let idleTimeout = options.eventStreamIdleTimeout
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                var parser = ServerSentEventParser()
                for try await chunk in stream.body {
                    lastActivity.touch()
                    let events = parser.consume(chunk)
                    for event in events where event.event == "poke" {
                        self.wakeup.signal()
                    }
                    // Heard: an event, or a keep-alive after the opening comment.
                    lastActivity.note(heard: !events.isEmpty || parser.comments > 1, retry: parser.retryMilliseconds)
                    if parser.overflowed { throw SyncGateClientError(.transport, "the event stream sent an event over 64 KiB") }
                }
            }
            group.addTask {
                while true {
                    try await Task.sleep(for: min(idleTimeout / 3, .seconds(5)))
                    if lastActivity.silence > idleTimeout { return }
                }
            }
            try await group.next()
            group.cancelAll()
        }
    }
}

/// When a stream last delivered bytes, whether it was heard, and the delay it asked for.
private final class LastActivity: Sendable {
    private let instant = Locked(ContinuousClock.now)
    private let state = Locked((heard: false, retry: Duration?.none))

    func touch() {
        instant.update { $0 = .now }
    }

    func note(heard: Bool, retry milliseconds: Int?) {
        state.update { state in
            if heard { state.heard = true }
            if let milliseconds { state.retry = .milliseconds(milliseconds) }
        }
    }

    /// Whether an event, or a keep-alive after the opening, arrived.
    var heard: Bool { state.update { $0.heard } }
    /// The stream's `retry:`, when it sent one.
    var retry: Duration? { state.update { $0.retry } }

    var silence: Duration {
        ContinuousClock.now - instant.update { $0 }
    }
}
