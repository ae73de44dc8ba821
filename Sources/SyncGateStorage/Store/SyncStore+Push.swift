package import SyncGateCore
package import SyncGateWire

/// Push nudges (docs/push.md): the nudger's passes, claims and records, and the fronts' presence.
extension SyncStore {
    package func trackPushFeeds() async throws -> Int {
        try await driver.trackPushFeeds()
    }

    package func markNudges(scopes: [Scope]?, feedLimit: Int, intervalMilliseconds: Int64) async throws -> NudgePass {
        try await driver.markNudges(scopes: scopes, feedLimit: feedLimit, intervalMilliseconds: intervalMilliseconds, now: clock.wallNow())
    }

    package func claimNudges(
        limit: Int, providers: Set<PushRegistration.Provider> = Set(PushRegistration.Provider.allCases), leaseMilliseconds: Int64,
        recheckMilliseconds: Int64
    ) async throws -> NudgeClaim {
        try await driver.claimNudges(
            limit: limit, providers: providers, leaseMilliseconds: leaseMilliseconds, recheckMilliseconds: recheckMilliseconds, now: clock.wallNow()
        )
    }

    package func finishNudge(_ nudge: ClaimedNudge, outcome: NudgeFinish, intervalMilliseconds: Int64) async throws {
        try await driver.finishNudge(nudge, outcome: outcome, intervalMilliseconds: intervalMilliseconds, now: clock.wallNow())
    }

    package func publishPresence(front: String, added: [DeviceKey], removed: [DeviceKey], lifetimeMilliseconds: Int64) async throws -> Bool {
        try await driver.publishPresence(front: front, added: added, removed: removed, expiresAt: clock.wallNow().adding(milliseconds: lifetimeMilliseconds))
    }

    package func endPresence(front: String) async throws {
        try await driver.endPresence(front: front)
    }

    package func deleteExpiredPresence() async throws -> Int {
        try await driver.deleteExpiredPresence(now: clock.wallNow())
    }

    package func nudgeBacklog() async throws -> (pending: Int, oldestPendingSince: Int64?) {
        try await driver.nudgeBacklog()
    }
}
