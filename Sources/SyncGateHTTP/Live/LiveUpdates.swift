import ServiceLifecycle
import SyncGateCore
import SyncGateStorage

/// Waiting for something to commit: a job to finish, a feed to advance.
///
/// A waiter subscribes to the store's ``ChangeNotifier`` (fed by one LISTEN connection per
/// process, or in-process signals), then re-checks the database whenever an event arrives and at
/// least every `pollInterval`, so a lost notification only delays the answer. On graceful
/// shutdown every wait ends at once with the current state.
struct LiveUpdates: Sendable {
    let store: any FrontStore
    let pollInterval: Duration

    /// The job once it is finished, or as it is when `timeout` passes; `nil` if it is not the user's.
    func waitForJob(id: Int64, userID: String, timeout: Duration) async throws -> JobSnapshot? {
        let subscription = store.notifier.subscribe(.init(jobs: [id]))
        defer { subscription.cancel() }
        return try await waitUntil(subscription: subscription, timeout: timeout) {
            let job = try await store.job(id: id, userID: userID)
            return (job, job?.state.isFinished ?? true)
        }
    }

    /// The next page that has news (changes, scope changes, force-resync), or an empty page at the deadline.
    func waitForPull(_ query: PullQuery, timeout: Duration) async throws -> PullPage {
        let scopes = try await store.readableScopes(userID: query.userID)
        // The user's own scope also carries membership changes (a household joined or left).
        let subscription = store.notifier.subscribe(.init(scopes: Set(scopes).union([.user(query.userID)])))
        defer { subscription.cancel() }
        return try await waitUntil(subscription: subscription, timeout: timeout) {
            let page = try await store.pull(query)
            return (page, page.hasNews)
        }
    }

    /// Re-evaluates `check` on every event and poll tick until it reports done or time runs out.
    private func waitUntil<Value: Sendable>(
        subscription: ChangeSubscription,
        timeout: Duration,
        _ check: @Sendable () async throws -> (Value, done: Bool)
    ) async throws -> Value {
        let deadline = ContinuousClock.now + timeout
        return try await withGracefulShutdownHandler {
            while true {
                let (value, done) = try await check()
                let remaining = ContinuousClock.now.duration(to: deadline)
                if done || remaining <= .zero { return value }
                // nil: the subscription ended (shutdown); answer with what there is.
                guard await subscription.next(timeout: min(pollInterval, remaining)) != nil else { return value }
            }
        } onGracefulShutdown: {
            subscription.cancel()
        }
    }
}
