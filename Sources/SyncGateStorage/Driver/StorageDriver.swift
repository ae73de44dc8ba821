package import Logging
package import SyncGateCore
package import SyncGateWire

/// A database as SyncGate uses it: single statements and transactions of statements, with SQL
/// and row decoding only. Every sequence of steps and every decision lives above the driver, in
/// ``SyncStore``, written once for every driver.
///
/// To add a driver, implement this protocol and ``StorageTransaction``, and pass the conformance
/// suite (`Tests/SyncGateConformanceTests`); see docs/storage-drivers.md.
///
/// Time: calls that compare against the current time take `now`. `nil` means the database's own
/// clock where it has one (PostgreSQL's `now()`, one clock for every process), the process clock
/// otherwise; tests pass a fixed instant instead of sleeping.
package protocol StorageDriver: Sendable {
    /// `postgres` or `sqlite`.
    var name: String { get }
    /// Where committed changes are announced: fed by NOTIFY (PostgreSQL) or by the driver after
    /// each commit (SQLite).
    var notifier: ChangeNotifier { get }

    // MARK: Schema

    func migrate(logger: Logger) async throws -> [Int]
    func schemaStatus() async throws -> SchemaStatus
    /// The migrations this driver applies (`sql/<driver>/`), in order.
    var migrations: [Migration] { get }
    /// The migrations the database records as applied, oldest first (none: never migrated).
    func appliedMigrations() async throws -> [AppliedMigration]
    /// A script that applies `migrations` by hand exactly as `migrate` would, recording each in
    /// `syncgate_migrations`: for a DBA who runs schema changes with their own tools.
    func migrationScript(_ migrations: [Migration]) -> String

    // MARK: Queue

    /// Inserts a job unless its user has `maximumQueuedPerUser` unfinished jobs or the queue
    /// `maximumQueuedTotal`; announces `jobsAvailable` once the insert has committed (PostgreSQL:
    /// in a statement of its own, so that the insert's commit never waits for the NOTIFY lock).
    func insertJob(_ job: QueuedJob, limits: QueueLimits, now: Timestamp?) async throws -> EnqueueResult
    func job(id: Int64, userID: String) async throws -> JobRecord?
    /// Moves up to `limit` runnable jobs to `running` under fresh lease tokens: oldest first, only
    /// a user's oldest unfinished job, skipping rows other workers are claiming.
    func claimJobs(workerID: String, limit: Int, leaseMilliseconds: Int64, now: Timestamp?) async throws -> [ClaimedJob<String>]
    /// Extends the leases still held; a job locked by its apply is skipped (it is alive).
    func extendLeases(_ leases: [JobLease], leaseMilliseconds: Int64, now: Timestamp?) async throws

    // MARK: Pull (each call reads one consistent snapshot)

    /// The user's active households, resync epoch, the device's watermark, and the head and floor
    /// of the user's feed, their households' feeds and `extraScopes`.
    func pullContext(userID: String, deviceID: String, extraScopes: [Scope]) async throws -> PullContext
    /// Reads the feeds in order, each after its position, `limit` rows in all at most (fewer feeds
    /// once it is reached), with the feeds' current floors.
    func readChanges(_ reads: [PullPlan.FeedRead], types: Set<String>?, limit: Int) async throws -> FeedPage
    /// Each request's rows (at most its limit and one more, in sequence order) and its feed's
    /// floor as of the same snapshot, in request order: the reads of the live waiters a commit
    /// woke, in as few statements as the driver can.
    func readFeeds(_ requests: [FeedReadRequest]) async throws -> [FeedRows]
    /// The ids of the households `userID` is an active member of, sorted.
    func activeHouseholds(userID: String) async throws -> [String]
    /// The heads of `feeds` and the scopes versions of `users` (absent: never written), in one read.
    func watchState(feeds: [Scope], users: [String]) async throws -> WatchState

    // MARK: Maintenance and administration

    /// Runs `body` while holding the cluster-wide maintenance lock; `nil` when another process holds it.
    func withMaintenanceLock<Result: Sendable>(_ body: @escaping @Sendable () async throws -> Result) async throws -> Result?
    /// Deletes up to `limit` jobs finished before `cutoff`, except the erase's own
    /// (``SyncStore/eraseDevice``: a later erase reads which households they left); returns how many.
    func deleteFinishedJobs(before cutoff: Timestamp, limit: Int) async throws -> Int
    /// Deletes up to `limit` idempotency records made before `cutoff`; returns how many.
    func deleteIdempotencyRecords(before cutoff: Timestamp, limit: Int) async throws -> Int
    /// Deletes the changes that a later change of the same entity in the same feed supersedes,
    /// looking only at changes no earlier call looked at. It takes the feeds with new changes
    /// whose scope keys sort after `after` (all feeds when nil), in scope order, up to
    /// `feedLimit` of them while their new changes add up to at most `changeLimit` (the first
    /// one in any case, with its next `changeLimit` sequence numbers); it skips those a writer
    /// holds, looks at the others and records how far each has been looked at.
    func compactNewChanges(after: String?, feedLimit: Int, changeLimit: Int) async throws -> CompactionBatch
    /// Feeds holding tombstones older than `cutoff` that the purge may take: while a webhook
    /// subscription exists, only feeds whose oldest such tombstone every subscription received
    /// (a feed held back is not locked, pass after pass, for nothing).
    func scopesWithTombstones(before cutoff: Timestamp) async throws -> [Scope]
    /// Scopes holding entities of any of `types` (a rebuild of derived data).
    func scopesHoldingEntities(ofTypes types: [String]) async throws -> [Scope]
    func stats(now: Timestamp?) async throws -> StoreStats
    /// Unfinished jobs by state and the oldest runnable job's age, by index: cheap at any table
    /// size (the metrics sample it every few seconds; ``stats(now:)`` counts whole tables).
    func queueStats(now: Timestamp?) async throws -> StoreStats
    func listJobs(_ filter: JobFilter) async throws -> [JobRecord]
    /// Any user's job, with its payload, lease and timings.
    func jobDetail(id: Int64) async throws -> JobDetail?
    /// Deletes a finished (`done` or `dead`) job; `false` when there is none by that id.
    func deleteFinishedJob(id: Int64) async throws -> Bool
    /// The primary's streaming standbys: name, state and replay lag (PostgreSQL's
    /// `pg_stat_replication`; none for SQLite).
    func replicas() async throws -> [(name: String, state: String, replayLagMilliseconds: Int64?)]
    /// Devices with a live connection per front, as the fronts publish them while nudging is
    /// configured (fronts whose heartbeat is fresh at `now`).
    func liveDevicesPerFront(now: Timestamp) async throws -> [(front: String, devices: Int)]
    /// Of `scopes` that exist: head, floor, how far compaction has looked, and tombstones held.
    func feedDetails(_ scopes: [Scope]) async throws -> [(scope: String, head: Int64, floor: Int64, compacted: Int64, tombstones: Int)]
    /// Records a maintenance pass (its report as JSON text), keeping the last `keep`.
    func recordMaintenanceRun(finishedAt: Timestamp, milliseconds: Int64, report: String, keep: Int) async throws
    /// The last `limit` maintenance passes, newest first.
    func maintenanceRuns(limit: Int) async throws -> [(finishedAt: Timestamp, milliseconds: Int64, report: String)]
    /// Jobs finished since `since`, per minute (milliseconds since the epoch at the minute's
    /// start), done and dead apart, oldest first; minutes without any are left out.
    func finishedPerMinute(since: Timestamp) async throws -> [(minute: Int64, done: Int, dead: Int)]
    /// The user's devices that pushed or registered for nudges, by id; `live` against `now`.
    func devices(userID: String, now: Timestamp) async throws -> [DeviceRecord]
    /// The rows of at most `limit` households (all when `nil`) whose ids sort after `after`,
    /// ordered by household id as the database compares them.
    func householdRows(userID: String?, after: String?, limit: Int?) async throws -> [HouseholdRow]

    // MARK: Service keys

    /// Stores a key; `false` when a key (valid or revoked) already has its name.
    func insertServiceKey(_ key: NewServiceKey, now: Timestamp?) async throws -> Bool
    /// Every key, revoked ones included, by name.
    func serviceKeys() async throws -> [ServiceKeyRecord]
    /// The key whose SHA-256 is `hash`, revoked or not; read on the request path.
    func serviceKey(hash: String) async throws -> ServiceKeyRecord?
    /// Revokes a valid key; `false` when no valid key has that name.
    func revokeServiceKey(name: String, now: Timestamp?) async throws -> Bool

    // MARK: Webhooks (docs/webhooks.md)

    /// Stores a subscription; `false` when one already has its name. The first subscription
    /// starts from the feeds' current heads: earlier changes are not announced.
    func insertWebhook(_ subscription: NewWebhookSubscription, now: Timestamp) async throws -> Bool
    /// Every subscription, by name.
    func webhooks() async throws -> [WebhookSubscription]
    /// Deletes a subscription and its deliveries; `false` when none has that name.
    func deleteWebhook(name: String) async throws -> Bool
    /// Pauses a subscription with `reason`, or resumes it (`nil`): its held deliveries are due at
    /// once, their attempts counted from zero. `false` when none has that name.
    func setWebhookPaused(name: String, reason: String?, now: Timestamp) async throws -> Bool
    /// Makes, for every subscription, a message of each feed's changes not yet announced (a
    /// range of sequence numbers, not a copy of the changes), and records how far each feed is
    /// announced, in one transaction. It takes feeds whose scope keys sort after `after` (all
    /// when nil), in scope order, up to `feedLimit` of them and the next `changeLimit` sequence
    /// numbers of each. Without subscriptions it does nothing.
    func announceChanges(after: String?, feedLimit: Int, changeLimit: Int, now: Timestamp) async throws -> WebhookAnnouncement
    /// Records the messages in `delivered` as delivered (the sender's attempts since its last
    /// claim; each only while it still holds its claim's lease), then takes up to `limit` due
    /// messages for an attempt, at most `perSubscription` of each active subscription and none
    /// of `excluding`: each the oldest undelivered message of its subscription and feed (feed
    /// order, counting those just recorded as delivered), skipping rows another sender takes;
    /// then reads the changes of their ranges. Each is due again after `leaseMilliseconds`
    /// unless finished first (a sender that died).
    func claimWebhookDeliveries(
        delivered: [WebhookClaim], limit: Int, perSubscription: Int, excluding: [String], leaseMilliseconds: Int64, now: Timestamp
    ) async throws -> [WebhookDelivery]
    /// Records an attempt's outcome, only while its message still holds the claim's lease: an
    /// attempt a resume or replay overtook changes nothing (its message is sent again).
    func finishWebhookDelivery(_ claim: WebhookClaim, outcome: WebhookAttemptOutcome, now: Timestamp) async throws
    /// Sends again the deliveries of a subscription made at or after `from`, delivered or not,
    /// and resumes it; `nil` when none has that name.
    func replayWebhook(name: String, from: Timestamp, now: Timestamp) async throws -> Int?
    /// Deliveries by state, per subscription (counts the replay window's delivered ones too: for
    /// `admin webhooks list`, not for sampling).
    func webhookBacklog() async throws -> [WebhookBacklog]
    /// Undelivered deliveries over every subscription, by the partial index of pending ones.
    func pendingWebhookDeliveries() async throws -> Int
    /// Deletes up to `limit` deliveries delivered before `cutoff`; returns how many.
    func deleteDeliveredWebhooks(before cutoff: Timestamp, limit: Int) async throws -> Int

    // MARK: Push registrations (docs/push.md)

    /// Stores `device`'s push address, replacing the one it had.
    func upsertPushRegistration(_ device: DeviceKey, _ registration: PushRegistration, now: Timestamp) async throws
    func pushRegistration(_ device: DeviceKey) async throws -> StoredPushRegistration?
    /// `false` when the device had none.
    func deletePushRegistration(_ device: DeviceKey) async throws -> Bool
    /// Gives every feed a registered device reads a position (at its head) if it has none: a
    /// household joined since the device registered. Returns how many it added.
    func trackPushFeeds() async throws -> Int
    /// For feeds in `scopes` (every tracked feed when `nil`) past their position, up to
    /// `feedLimit`: adds each to the pending set of every registered device reading it, except a
    /// device that wrote every change of the range; a device with nothing pending becomes due at
    /// `max(now, last sent + interval)`. Moves the positions, in the same transaction.
    func markNudges(scopes: [Scope]?, feedLimit: Int, intervalMilliseconds: Int64, now: Timestamp) async throws -> NudgePass
    /// Takes up to `limit` due nudges, leased for `leaseMilliseconds`, skipping rows another
    /// nudger holds. A due nudge whose device has a live connection (on a front whose heartbeat
    /// is fresh) is held `recheckMilliseconds` instead, and dropped if the device still has one
    /// then: that connection delivers the changes. (A front learns that a client vanished only
    /// when it next writes to it: a keep-alive, or the long-poll's answer.) Only registrations
    /// of `providers` are taken.
    func claimNudges(
        limit: Int, providers: Set<PushRegistration.Provider>, leaseMilliseconds: Int64, recheckMilliseconds: Int64, now: Timestamp
    ) async throws -> NudgeClaim
    /// Records how an attempt ended; a sent nudge leaves the device due again no sooner than
    /// `intervalMilliseconds` after it if its pending set grew meanwhile.
    func finishNudge(_ nudge: ClaimedNudge, outcome: NudgeFinish, intervalMilliseconds: Int64, now: Timestamp) async throws
    /// A front's live connections: its heartbeat, valid until `expiresAt`, and the devices that
    /// opened their first or closed their last connection on it since it last published (a
    /// device is in one list at most). Answers whether the front's list was still valid before:
    /// `false` when its heartbeat had expired (its rows may have been swept), so that the front
    /// publishes its whole list again.
    func publishPresence(front: String, added: [DeviceKey], removed: [DeviceKey], expiresAt: Timestamp) async throws -> Bool
    /// A front stopping: its presence ends at once.
    func endPresence(front: String) async throws
    /// Deletes the presence of fronts whose heartbeat expired before `now` (fronts that died).
    func deleteExpiredPresence(now: Timestamp) async throws -> Int
    /// Devices with a nudge pending, and the oldest pending change's commit time.
    func nudgeBacklog() async throws -> (pending: Int, oldestPendingSince: Int64?)

    // MARK: Current data (the service API's reads)

    /// The entity at `key`, live or tombstoned.
    func entity(_ key: EntityKey) async throws -> StoredEntityRow?
    /// Up to `limit` live entities of `scope` after `after`, in (type, id) order; of `types` only,
    /// when given.
    func currentEntities(in scope: Scope, types: Set<String>?, after: EntityPosition?, limit: Int) async throws -> [StoredEntityRow]

    /// Runs `body` in one write transaction; commits when it returns, rolls back when it throws.
    /// Announcements made in it reach the notifier only if it commits.
    func transaction<Result: Sendable>(
        now: Timestamp?, for purpose: TransactionPurpose, _ body: @escaping @Sendable (any StorageTransaction) async throws -> Result
    ) async throws -> Result
}

/// What a transaction is for, which decides how long it may take (and, on PostgreSQL, which pool
/// it takes its connection from).
package enum TransactionPurpose: Sendable, Hashable {
    /// A worker's: applying or settling jobs, within the worker's deadline.
    case apply
    /// An operator's or the maintenance pass's (an erase, a purge batch, a recompute), whose size
    /// is the data's: within the maintenance deadline.
    case maintenance
}

extension StorageDriver {
    /// A worker's transaction (``TransactionPurpose/apply``).
    package func transaction<Result: Sendable>(
        now: Timestamp?, _ body: @escaping @Sendable (any StorageTransaction) async throws -> Result
    ) async throws -> Result {
        try await transaction(now: now, for: .apply, body)
    }
}

/// The statements of one open write transaction.
///
/// An apply needs few of them whatever it holds: ``lock(jobs:feeds:)``, ``load(_:)``, at most two
/// ``loadEntities(_:)`` (parents only stored documents name, a derivation's inputs that
/// ``load(_:)`` could not know of) and ``write(_:)``, for one job or for several jobs of
/// different users applied together.
package protocol StorageTransaction: AnyObject {
    /// Round trips to the database so far, the commit's included (a job's apply must not need
    /// more for more operations): statements on PostgreSQL, BEGIN among them; accesses to the
    /// writer on SQLite, whose statements are calls into the library in process.
    var roundTrips: Int { get }

    /// Locks the jobs still `running` under their leases, then creates the missing feeds of
    /// `feeds` and locks them in the given (sorted) order: writers of a feed serialise here.
    /// Returns the jobs held (the others' leases were lost) and the feeds' heads.
    func lock(jobs leases: [JobLease], feeds scopes: [Scope]) async throws -> ApplyLocks
    /// Creates missing feeds, locks them in the given order and returns their heads.
    func lockFeeds(_ scopes: [Scope]) async throws -> [Scope: Int64]
    /// What an apply reads once it holds its feeds, in one snapshot taken after the locks:
    /// entities, idempotency records, households and the derivation inputs known in advance.
    func load(_ reads: ApplyReads) async throws -> ApplyRows
    func loadEntities(_ queries: [EntityQuery]) async throws -> [StoredEntityRow]

    /// Writes what an apply decided, at once: entities and their changes, feed heads,
    /// idempotency records, the jobs' results and their devices' watermarks; announces
    /// `write.events` when (and only if) the transaction commits.
    func write(_ write: ApplyWrite) async throws
    /// Upserts entities, appends one change per entity (at its `sequence`) and sets the feed heads.
    func writeEntities(_ entities: [EntityRowWrite], heads: [Scope: Int64]) async throws
    func writeHouseholds(_ households: [HouseholdState]) async throws
    /// Deletes the feeds of `scopes` that hold no change (head 0), locked by this transaction: those
    /// the lock made for writes the apply refused (a household that does not exist).
    func dropEmptyFeeds(_ scopes: [Scope]) async throws
    /// Finishes a job (`done` or `dead`) with its results and advances its device's watermark.
    func finishJob(_ job: FinishedJob, error: String?) async throws
    /// Returns a running job to `retrying`, claimable after `delayMilliseconds`.
    func retryJob(id: Int64, delayMilliseconds: Int64, error: String) async throws
    /// Up to `limit` running jobs whose lease has expired, locked, skipping rows an apply holds.
    func expiredLeases(limit: Int) async throws -> [ClaimedJob<String>]
    /// Queues dead jobs again with fresh attempts (all of them when `ids` is nil); returns how many.
    /// A job whose user has a later job unfinished stays dead: queued, it would be claimed beside
    /// that job (a claim waits only for a user's earlier jobs), two of one user's jobs at a time.
    func requeueDeadJobs(ids: [Int64]?) async throws -> Int
    /// Locks a job no worker holds yet (`queued` or `retrying`) and whose device has no earlier
    /// job unfinished (a device's jobs finish in push order: its watermark counts them so);
    /// `nil` when there is none by that id in those states.
    func lockWaitingJob(id: Int64) async throws -> JobDetail?
    /// Deletes what is the user's alone: their jobs (first: an apply in flight finishes before,
    /// and one not yet started then holds no job), idempotency records, devices, push
    /// registrations and presence, their own feed (entities, changes, its position and webhook
    /// messages) and their rows of archived households; and names no writer for their devices'
    /// changes in the feeds of `households`. The user's row (resync epoch) stays.
    func eraseUser(_ userID: String, households: [String]) async throws -> ErasedUser
    /// Deletes up to `limit` of the feed's tombstones older than `cutoff` (oldest first), every
    /// older change of their entities and the tombstoned entities, and raises the feed's floor to
    /// the newest purged sequence number; returns how many tombstones went. Lock the feed first.
    func purgeTombstones(scope: Scope, before cutoff: Timestamp, limit: Int) async throws -> Int
    /// Raises the resync epoch of one user, or of everyone.
    func bumpResyncEpoch(userID: String?) async throws
    /// Raises the scopes version of each user (creating their row); returns the new versions.
    func bumpScopesVersions(userIDs: [String]) async throws -> [ExactKey: Int64]
    /// Announces events when (and only if) the transaction commits.
    func announce(_ events: [StoreEvent]) async throws
}

// MARK: - Rows

extension StorageTransaction {
    /// Locks the job if it is still `running` under `lease`; false when the lease was lost.
    func lockJob(_ lease: JobLease) async throws -> Bool {
        try await lock(jobs: [lease], feeds: []).jobs.contains(lease.id)
    }
}

/// What ``StorageTransaction/lock(jobs:feeds:)`` holds.
package struct ApplyLocks: Sendable, Hashable {
    /// The jobs still running under the given leases.
    package var jobs: Set<Int64>
    package var heads: [Scope: Int64]

    package init(jobs: Set<Int64>, heads: [Scope: Int64]) {
        self.jobs = jobs
        self.heads = heads
    }
}

/// A user's idempotency key.
package struct IdempotencyKey: Sendable, Hashable, Comparable {
    package var userID: String
    package var key: String

    package init(userID: String, key: String) {
        self.userID = userID
        self.key = key
    }

    // By bytes, as the databases compare the record's key (see `String.sameBytes(as:)`).
    package static func == (lhs: IdempotencyKey, rhs: IdempotencyKey) -> Bool {
        lhs.userID.sameBytes(as: rhs.userID) && lhs.key.sameBytes(as: rhs.key)
    }

    package func hash(into hasher: inout Hasher) {
        userID.hashBytes(into: &hasher)
        key.hashBytes(into: &hasher)
    }

    package static func < (lhs: IdempotencyKey, rhs: IdempotencyKey) -> Bool {
        (ExactKey(lhs.userID), ExactKey(lhs.key)) < (ExactKey(rhs.userID), ExactKey(rhs.key))
    }
}

/// What ``StorageTransaction/load(_:)`` reads.
package struct ApplyReads: Sendable, Hashable {
    /// Entities by key (live or tombstoned).
    package var entities: [EntityKey] = []
    package var idempotencyKeys: [IdempotencyKey] = []
    /// Households with their members.
    package var households: [String] = []
    /// Derivation inputs (``Derivation/inputs(for:)``: `.keys` and `.groupMembers`), returned
    /// apart in ``ApplyRows/inputs``.
    package var inputs: [EntityQuery] = []
}

/// What ``StorageTransaction/load(_:)`` found.
package struct ApplyRows: Sendable, Hashable {
    package var entities: [StoredEntityRow]
    /// The recorded keys, with the version each answered.
    package var recorded: [IdempotencyKey: Int64?]
    package var households: [HouseholdRow]
    /// What ``ApplyReads/inputs`` found.
    package var inputs: [StoredEntityRow]

    package init(
        entities: [StoredEntityRow] = [], recorded: [IdempotencyKey: Int64?] = [:], households: [HouseholdRow] = [], inputs: [StoredEntityRow] = []
    ) {
        self.entities = entities
        self.recorded = recorded
        self.households = households
        self.inputs = inputs
    }
}

/// An idempotency record to write: the key answers `duplicate` with `version` from now on.
package struct IdempotencyRecord: Sendable, Hashable {
    package var userID: String
    package var key: String
    package var version: Int64?
}

/// What ``StorageTransaction/write(_:)`` writes.
package struct ApplyWrite: Sendable, Hashable {
    /// Upserted, each appending one change to its feed at its `sequence`.
    package var entities: [EntityRowWrite] = []
    /// The new heads of the feeds the entities advance.
    package var heads: [Scope: Int64] = [:]
    /// A plain insert: a key recorded concurrently (which per-user ordering rules out) aborts
    /// the transaction instead of applying twice.
    package var records: [IdempotencyRecord] = []
    /// Jobs done (one per device at most), each advancing its device's watermark.
    package var finished: [FinishedJob] = []
    package var events: [StoreEvent] = []

    package init() {}
}

/// An entity row as stored: its JSON columns still text.
package struct StoredEntityRow: Sendable, Hashable {
    package var scope: String
    package var entityType: String
    package var entityID: String
    package var version: Int64
    package var data: String?
    package var meta: String?
    package var clientTimestamp: Int64
    package var updatedAt: Int64

    package init(scope: String, entityType: String, entityID: String, version: Int64, data: String?, meta: String?, clientTimestamp: Int64, updatedAt: Int64) {
        self.scope = scope
        self.entityType = entityType
        self.entityID = entityID
        self.version = version
        self.data = data
        self.meta = meta
        self.clientTimestamp = clientTimestamp
        self.updatedAt = updatedAt
    }
}

/// An entity to upsert, and the change it appends to its feed (same version, document and time).
package struct EntityRowWrite: Sendable, Hashable {
    /// The row as it is stored; its `data` is `nil` for a tombstone.
    package var row: StoredEntityRow
    /// The group a derivation files the entity under (see ``Derivation``).
    package var groupKey: String?
    /// The change's sequence number in the scope's feed.
    package var sequence: Int64
    /// Who made the change when it was not a device: `service:<key name>`.
    package var origin: String? = nil
    /// The device whose push made the change, `<device id>/<user id>` (push nudges skip it).
    package var writer: String? = nil
}

/// What a pull plans with: read in one snapshot.
package struct PullContext: Sendable, Hashable {
    package var households: [String]
    package var resyncEpoch: Int64
    package var scopesVersion: Int64
    package var deviceWatermark: Int64
    package var feeds: [Scope: FeedInfo]

    package init(households: [String], resyncEpoch: Int64, scopesVersion: Int64, deviceWatermark: Int64, feeds: [Scope: FeedInfo]) {
        self.households = households
        self.resyncEpoch = resyncEpoch
        self.scopesVersion = scopesVersion
        self.deviceWatermark = deviceWatermark
        self.feeds = feeds
    }
}

/// A change row as stored.
package struct ChangeRow: Sendable, Hashable {
    package var sequence: Int64
    package var entityType: String
    package var entityID: String
    package var version: Int64
    package var data: String?
    package var updatedAt: Int64
    /// `service:<key name>` for a change a service key's push made; `nil` for a device's.
    package var origin: String?

    package init(sequence: Int64, entityType: String, entityID: String, version: Int64, data: String?, updatedAt: Int64, origin: String? = nil) {
        self.sequence = sequence
        self.entityType = entityType
        self.entityID = entityID
        self.version = version
        self.data = data
        self.updatedAt = updatedAt
        self.origin = origin
    }
}

/// One feed's rows of a ``StorageDriver/readFeeds(_:)`` request, and its floor as of that read.
package struct FeedRows: Sendable, Hashable {
    package var rows: [ChangeRow]
    package var floor: Int64

    package init(rows: [ChangeRow], floor: Int64) {
        self.rows = rows
        self.floor = floor
    }
}

/// The rows a pull read, per feed (a feed is absent when the page filled before it), and the
/// feeds' floors as of that read.
package struct FeedPage: Sendable, Hashable {
    package var rows: [Scope: [ChangeRow]]
    package var floors: [Scope: Int64]

    package init(rows: [Scope: [ChangeRow]] = [:], floors: [Scope: Int64] = [:]) {
        self.rows = rows
        self.floors = floors
    }
}

/// One call of ``StorageDriver/compactNewChanges(after:feedLimit:changeLimit:)``.
package struct CompactionBatch: Sendable, Hashable {
    package var deletedChanges: Int
    /// The feeds looked at (not those a writer held).
    package var feeds: Int
    /// The greatest scope key among the feeds taken, looked at or held by a writer (nil: no feed
    /// after the one asked about has new changes).
    package var lastScope: String?
    /// Whether a feed looked at has new changes beyond the change limit (it needs another batch).
    package var cutShort: Bool

    package init(deletedChanges: Int, feeds: Int, lastScope: String? = nil, cutShort: Bool = false) {
        self.deletedChanges = deletedChanges
        self.feeds = feeds
        self.lastScope = lastScope
        self.cutShort = cutShort
    }
}
