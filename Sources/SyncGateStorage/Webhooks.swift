package import SyncGateCore
package import SyncGateWire

/// What a webhook subscription hears of: entity changes by kind, and household membership
/// changes (the `household_members` entities) apart from them.
package enum WebhookEvent: String, Sendable, Hashable, CaseIterable, Comparable {
    case created, updated, deleted, membership

    package static func < (lhs: WebhookEvent, rhs: WebhookEvent) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }

    /// The stored form: the names, in declaration order, comma-separated.
    package static func stored(_ events: Set<WebhookEvent>) -> String {
        events.sorted().map(\.rawValue).joined(separator: ",")
    }

    /// Events from their stored form; a name this release does not know is dropped.
    package static func parse(stored text: String) -> Set<WebhookEvent> {
        Set(text.split(separator: ",").compactMap { WebhookEvent(rawValue: String($0)) })
    }

    /// The event a change is: membership for `household_members`, otherwise deleted (no data),
    /// created (version 1) or updated.
    package static func of(entityType: String, version: Int64, deleted: Bool) -> WebhookEvent {
        if entityType == "household_members" { return .membership }
        if deleted { return .deleted }
        return version == 1 ? .created : .updated
    }
}

/// A receiver of change webhooks as stored.
package struct WebhookSubscription: Sendable, Hashable {
    package var id: Int64
    package var name: String
    package var url: String
    /// `whsec_` and the base64 of the signing key.
    package var secret: String
    /// `nil`: every entity type.
    package var entityTypes: Set<String>?
    package var events: Set<WebhookEvent>
    package var createdAt: Timestamp
    /// Set while deliveries are held (too many failures, or an operator's pause).
    package var pausedAt: Timestamp?
    package var pausedReason: String?

    package init(
        id: Int64, name: String, url: String, secret: String, entityTypes: Set<String>?, events: Set<WebhookEvent>,
        createdAt: Timestamp, pausedAt: Timestamp? = nil, pausedReason: String? = nil
    ) {
        self.id = id
        self.name = name
        self.url = url
        self.secret = secret
        self.entityTypes = entityTypes
        self.events = events
        self.createdAt = createdAt
        self.pausedAt = pausedAt
        self.pausedReason = pausedReason
    }

    /// Whether this subscription wants `change`.
    package func wants(_ change: AnnouncedChange) -> Bool {
        if let entityTypes, !entityTypes.contains(change.row.entityType) { return false }
        return events.contains(change.event)
    }

    /// The stored form of ``entityTypes``.
    package static func storedTypes(_ types: Set<String>?) -> String? {
        types.map { $0.sorted().joined(separator: ",") }
    }

    package static func parse(storedTypes text: String?) -> Set<String>? {
        text.map { Set($0.split(separator: ",").map(String.init)) }
    }
}

/// A subscription to create.
package struct NewWebhookSubscription: Sendable, Hashable {
    package var name: String
    package var url: String
    package var secret: String
    package var entityTypes: Set<String>?
    package var events: Set<WebhookEvent>

    package init(name: String, url: String, secret: String, entityTypes: Set<String>?, events: Set<WebhookEvent>) {
        self.name = name
        self.url = url
        self.secret = secret
        self.entityTypes = entityTypes
        self.events = events
    }
}

/// A committed change in a message's range, as the sender renders it.
package struct AnnouncedChange: Sendable, Hashable {
    package var scope: Scope
    /// The change as the feed holds it: its document is the stored JSON text, which the body
    /// takes as it is (parsing and writing it again was most of the announcer's CPU).
    package var row: ChangeRow
    package var committedAt: Int64

    package init(scope: Scope, row: ChangeRow, committedAt: Int64) {
        self.scope = scope
        self.row = row
        self.committedAt = committedAt
    }

    package var event: WebhookEvent { WebhookEvent.of(entityType: row.entityType, version: row.version, deleted: row.data == nil) }
}

/// A message claimed for an attempt: its subscription, and the range of one feed it announces
/// with the changes the feed holds there (read after the claim; compaction keeps them until
/// the message is delivered). The body is rendered from them at every attempt: the same bytes
/// until the message is delivered (docs/webhooks.md says when a replay's differ).
package struct WebhookDelivery: Sendable, Hashable {
    package var id: Int64
    package var subscription: WebhookSubscription
    package var scope: Scope
    package var firstSequence: Int64
    package var lastSequence: Int64
    /// The newest change's commit time (the delivery lag starts there).
    package var committedAt: Int64
    /// When the announcer made it: the body's `timestamp`.
    package var createdAt: Int64
    package var attempts: Int
    /// When this claim's lease ends (milliseconds since the epoch).
    package var leaseEnd: Int64
    /// The claim's number in its row, which every claim, resume and replay takes anew: the
    /// outcome is recorded only while the message still holds this number and this lease.
    package var claimNumber: Int64
    package var changes: [AnnouncedChange]

    package init(
        id: Int64, subscription: WebhookSubscription, scope: Scope, firstSequence: Int64, lastSequence: Int64,
        committedAt: Int64, createdAt: Int64, attempts: Int, leaseEnd: Int64, claimNumber: Int64, changes: [AnnouncedChange] = []
    ) {
        self.id = id
        self.subscription = subscription
        self.scope = scope
        self.firstSequence = firstSequence
        self.lastSequence = lastSequence
        self.committedAt = committedAt
        self.createdAt = createdAt
        self.attempts = attempts
        self.leaseEnd = leaseEnd
        self.claimNumber = claimNumber
        self.changes = changes
    }

    package var messageID: String { "msg_\(id)" }

    package var claim: WebhookClaim { WebhookClaim(id: id, leaseEnd: leaseEnd, number: claimNumber) }
}

/// One claimed attempt of a message, as its outcome is recorded: the message, the end of the
/// lease the claim gave it and the claim's number (see ``WebhookDelivery/claimNumber``).
package struct WebhookClaim: Sendable, Hashable {
    package var id: Int64
    package var leaseEnd: Int64
    package var number: Int64

}

/// How an attempt ended, as the sender decided it.
package enum WebhookAttemptOutcome: Sendable, Hashable {
    case delivered
    /// Try again at `at` (milliseconds since the epoch).
    case retry(at: Int64, error: String)
    /// Give up for now: the subscription is paused and the delivery waits for a resume or replay.
    case pause(error: String)
}

/// What one announcer pass made: a message per subscription for each feed range it took.
package struct WebhookAnnouncement: Sendable, Hashable {
    /// Subscriptions there are (none: nothing was read).
    package var subscriptions = 0
    package var feeds = 0
    /// Sequence numbers the ranges cover (before compaction and any subscription's filter).
    package var changes = 0
    package var deliveries = 0
    /// The last feed looked at; the next pass starts after it.
    package var lastScope: String?
    /// Whether feeds were left for a next pass (the limits were reached, or a writer held one).
    package var more = false

    package init(subscriptions: Int = 0, feeds: Int = 0, changes: Int = 0, deliveries: Int = 0, lastScope: String? = nil, more: Bool = false) {
        self.subscriptions = subscriptions
        self.feeds = feeds
        self.changes = changes
        self.deliveries = deliveries
        self.lastScope = lastScope
        self.more = more
    }
}

/// Deliveries by state, for metrics and `admin webhooks list`.
package struct WebhookBacklog: Sendable, Hashable {
    package var subscription: String
    package var pending: Int
    package var failing: Int
    package var delivered: Int
    /// Milliseconds since the epoch of the oldest pending delivery's newest change.
    package var oldestPendingCommittedAt: Int64?

    package init(subscription: String, pending: Int, failing: Int, delivered: Int, oldestPendingCommittedAt: Int64?) {
        self.subscription = subscription
        self.pending = pending
        self.failing = failing
        self.delivered = delivered
        self.oldestPendingCommittedAt = oldestPendingCommittedAt
    }
}

/// Subscription management as the service API offers it (`/v1/service/webhooks`, `admin` scope):
/// the front calls it, the webhooks module implements it (the same functions as the CLI).
package protocol WebhookAdministration: Sendable {
    /// Every subscription with its backlog, never a secret.
    func list() async throws -> [JSONValue]
    /// Creates a subscription; answers it with its `secret` (shown once). Throws
    /// ``WebhookRequestRefused`` for a request that cannot be served as asked.
    func create(name: String, url: String, entityTypes: Set<String>?, events: [String]) async throws -> JSONValue
    func delete(name: String) async throws -> Bool
    func pause(name: String) async throws -> Bool
    func resume(name: String) async throws -> Bool
    /// How many messages are sent again; `nil` when no subscription has the name.
    func replay(name: String, from: Timestamp) async throws -> Int?
}

/// A subscription request refused for what it asks (a 400), with the reason.
package struct WebhookRequestRefused: Error, Sendable, CustomStringConvertible {
    package var description: String

    package init(_ description: String) {
        self.description = description
    }
}
