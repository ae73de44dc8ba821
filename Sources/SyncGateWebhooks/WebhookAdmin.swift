package import SyncGateStorage
package import SyncGateWire
import SyncGateCore

/// Subscription management, called alike by `syncgate admin webhooks` and the service API.
package enum WebhookAdmin {
    typealias Refusal = WebhookRequestRefused

    /// Checks and stores a subscription with a new secret; returns it with the secret (shown once
    /// to the caller, kept by the server: it signs with it). The receiver URL is resolved now, so
    /// that a loopback, link-local or private receiver is refused at once unless `allowPrivate`.
    package static func create(
        in store: SyncStore, name: String, url: String, entityTypes: Set<String>?, events: Set<WebhookEvent>, allowPrivate: Bool
    ) async throws -> (WebhookSubscription, secret: String) {
        guard NewServiceKey.isValidName(name) else { throw Refusal("a subscription's name is 1 to 64 characters of A-Z a-z 0-9 . _ -") }
        guard !events.isEmpty else { throw Refusal("name at least one event: created, updated, deleted, membership") }
        // No control characters: PostgreSQL refuses a NUL in text (the request would be a 500).
        func hasControl(_ text: String) -> Bool { text.unicodeScalars.contains(where: IdentifierLimits.isControl) }
        if let entityTypes, entityTypes.isEmpty || entityTypes.contains(where: { $0.isEmpty || $0.contains(",") || hasControl($0) }) {
            throw Refusal("entity types are names without commas or control characters; leave them out for every type")
        }
        guard url.utf8.count <= 2048, !hasControl(url) else { throw Refusal("a receiver URL is at most 2048 bytes, without control characters") }
        let target: (secure: Bool, host: String, port: Int)
        switch WebhookAddressPolicy.parse(url) {
        case .failure(let refusal): throw Refusal(refusal.description)
        case .success(let parsed): target = parsed
        }
        if !allowPrivate, let refusal = await WebhookSender.refusal(ofHost: target.host) { throw Refusal(refusal) }
        let secret = WebhookSignature.newSecret()
        let new = NewWebhookSubscription(name: name, url: url, secret: secret, entityTypes: entityTypes, events: events)
        guard try await store.createWebhook(new) else { throw Refusal("a subscription named '\(name)' exists") }
        guard let created = try await store.webhooks().first(where: { $0.name == name }) else {
            throw Refusal("the subscription '\(name)' was deleted as it was created")
        }
        return (created, secret)
    }

    /// Events from their names; `nil` (every event) for none, a refusal for an unknown one.
    package static func events(_ names: [String]) throws -> Set<WebhookEvent> {
        if names.isEmpty { return Set(WebhookEvent.allCases) }
        return try Set(names.flatMap { $0.split(separator: ",") }.map { name in
            guard let event = WebhookEvent(rawValue: String(name)) else {
                throw Refusal("unknown event '\(name)': created, updated, deleted or membership")
            }
            return event
        })
    }

    /// A subscription as the API and `--json` show it: never its secret.
    package static func json(_ subscription: WebhookSubscription, backlog: WebhookBacklog?) -> JSONValue {
        .object([
            "name": .string(subscription.name),
            "url": .string(subscription.url),
            "entity_types": subscription.entityTypes.map { .array($0.sorted().map(JSONValue.string)) } ?? .null,
            "events": .array(subscription.events.sorted().map { .string($0.rawValue) }),
            "created_at": .string(subscription.createdAt.rfc3339),
            "paused_at": subscription.pausedAt.map { .string($0.rfc3339) } ?? .null,
            "paused_reason": subscription.pausedReason.map(JSONValue.string) ?? .null,
            "pending": .int(Int64(backlog?.pending ?? 0)),
            "failing": .int(Int64(backlog?.failing ?? 0)),
            "delivered": .int(Int64(backlog?.delivered ?? 0)),
            "oldest_pending_committed_at": backlog?.oldestPendingCommittedAt.map { .string(Timestamp(millisecondsSinceEpoch: $0).rfc3339) } ?? .null,
        ])
    }

    /// Every subscription with its backlog, as ``json(_:backlog:)``.
    package static func list(in store: SyncStore) async throws -> [JSONValue] {
        let backlog = Dictionary(uniqueKeysWithValues: try await store.webhookBacklog().map { ($0.subscription, $0) })
        return try await store.webhooks().map { json($0, backlog: backlog[$0.name]) }
    }
}

/// ``WebhookAdministration`` on a store: what `/v1/service/webhooks` calls.
package struct StoreWebhookAdministration: WebhookAdministration {
    let store: SyncStore
    let allowPrivate: Bool

    package init(store: SyncStore, allowPrivate: Bool) {
        self.store = store
        self.allowPrivate = allowPrivate
    }

    package func list() async throws -> [JSONValue] {
        try await WebhookAdmin.list(in: store)
    }

    package func create(name: String, url: String, entityTypes: Set<String>?, events: [String]) async throws -> JSONValue {
        let (created, secret) = try await WebhookAdmin.create(
            in: store, name: name, url: url, entityTypes: entityTypes, events: try WebhookAdmin.events(events), allowPrivate: allowPrivate
        )
        guard case .object(var body) = WebhookAdmin.json(created, backlog: nil) else { return .null }
        body["secret"] = .string(secret)
        return .object(body)
    }

    package func delete(name: String) async throws -> Bool { try await store.deleteWebhook(name: name) }
    package func pause(name: String) async throws -> Bool { try await store.pauseWebhook(name: name, reason: "paused through the service API") }
    package func resume(name: String) async throws -> Bool { try await store.resumeWebhook(name: name) }
    package func replay(name: String, from: Timestamp) async throws -> Int? { try await store.replayWebhook(name: name, from: from) }
}
