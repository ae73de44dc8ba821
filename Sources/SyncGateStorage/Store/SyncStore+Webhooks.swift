import SyncGateCore
package import SyncGateWire

/// Change webhooks (docs/webhooks.md): subscriptions, the announcer's messages of new feed
/// ranges, and the sender's claims. Times come from the store's clock (tests pass a manual one).
extension SyncStore {
    package func createWebhook(_ subscription: NewWebhookSubscription) async throws -> Bool {
        try await driver.insertWebhook(subscription, now: clock.wallNow())
    }

    package func webhooks() async throws -> [WebhookSubscription] {
        try await driver.webhooks()
    }

    package func deleteWebhook(name: String) async throws -> Bool {
        try await driver.deleteWebhook(name: name)
    }

    package func pauseWebhook(name: String, reason: String) async throws -> Bool {
        try await driver.setWebhookPaused(name: name, reason: reason, now: clock.wallNow())
    }

    package func resumeWebhook(name: String) async throws -> Bool {
        try await driver.setWebhookPaused(name: name, reason: nil, now: clock.wallNow())
    }

    package func replayWebhook(name: String, from: Timestamp) async throws -> Int? {
        try await driver.replayWebhook(name: name, from: from, now: clock.wallNow())
    }

    package func webhookBacklog() async throws -> [WebhookBacklog] {
        try await driver.webhookBacklog()
    }

    package func pendingWebhookDeliveries() async throws -> Int {
        try await driver.pendingWebhookDeliveries()
    }

    /// One announcer batch (see ``StorageDriver/announceChanges(after:feedLimit:changeLimit:now:)``).
    package func announceChanges(after: String?, feedLimit: Int, changeLimit: Int) async throws -> WebhookAnnouncement {
        try await driver.announceChanges(after: after, feedLimit: feedLimit, changeLimit: changeLimit, now: clock.wallNow())
    }

    /// One sender's claim (see ``StorageDriver/claimWebhookDeliveries(delivered:limit:perSubscription:excluding:leaseMilliseconds:now:)``).
    package func claimWebhookDeliveries(
        delivered: [WebhookClaim] = [], limit: Int, perSubscription: Int, excluding: [String], leaseMilliseconds: Int64
    ) async throws -> [WebhookDelivery] {
        try await driver.claimWebhookDeliveries(
            delivered: delivered, limit: limit, perSubscription: perSubscription, excluding: excluding, leaseMilliseconds: leaseMilliseconds,
            now: clock.wallNow()
        )
    }

    package func finishWebhookDelivery(_ claim: WebhookClaim, outcome: WebhookAttemptOutcome) async throws {
        try await driver.finishWebhookDelivery(claim, outcome: outcome, now: clock.wallNow())
    }

    /// Deletes deliveries delivered more than `age` ago: the replay window ends there.
    package func deleteDeliveredWebhooks(olderThanMilliseconds age: Int64) async throws -> Int {
        let cutoff = clock.wallNow().adding(milliseconds: -age)
        return try await inBatches { try await driver.deleteDeliveredWebhooks(before: cutoff, limit: $0) }
    }
}
