import SyncGateWire
/// The in-memory table a front keeps of what its live waiters (long-polls and event streams)
/// read, and the decisions of whom to wake: a value-type state machine whose mutating methods
/// return the wake-ups to deliver, with no I/O.
///
/// A waiter registers the user, device and feeds it reads *before* it reads the database, then
/// arms itself with the positions and scopes version that read returned. Events that commit in
/// between are recorded at registration's feeds and users, so arming compares them and wakes at
/// once: no wake-up is lost between the read and the wait.
///
/// Heads and versions are kept only while a waiter watches them, so memory follows the waiters,
/// not the number of feeds.
///
/// A long-poll that ends with nothing new *lingers*: it stays armed, uncounted against the caps,
/// until the device polls again with the cursor it was given (``adopt(_:)``), something passes it
/// (it is dropped: the next poll reads), or it expires (``expireLingering(before:)``). While it
/// stays armed and unwoken, nothing it reads has moved, so the next poll may wait without reading
/// — the same guarantee a waiter asleep all along has.
package struct WatchTable: Sendable {
    package typealias WaiterID = Int

    /// What a waiter learns when woken. Reasons accumulate until the waiter takes them.
    package struct Wake: Sendable, Hashable {
        /// Feeds whose head passed the waiter's position.
        package var advanced: Set<Scope> = []
        /// The user's scopes changed (a household joined or left, or a resync for this user).
        package var scopesChanged = false
        /// A resync for everyone: the waiter reads everything again.
        package var resynchronize = false

        package init(advanced: Set<Scope> = [], scopesChanged: Bool = false, resynchronize: Bool = false) {
            self.advanced = advanced
            self.scopesChanged = scopesChanged
            self.resynchronize = resynchronize
        }

        package var isEmpty: Bool { advanced.isEmpty && !scopesChanged && !resynchronize }

        package mutating func merge(_ other: Wake) {
            advanced.formUnion(other.advanced)
            scopesChanged = scopesChanged || other.scopesChanged
            resynchronize = resynchronize || other.resynchronize
        }
    }

    /// Caps on live connections (long-polls and event streams) held at once.
    package struct Limits: Sendable, Hashable {
        package var perUser: Int
        package var perProcess: Int

        package init(perUser: Int = 20, perProcess: Int = 25_000) {
            self.perUser = perUser
            self.perProcess = perProcess
        }
    }

    package enum Refusal: Error, Sendable, Hashable {
        case userLimit(Int)
        case processLimit(Int)
    }

    struct Watched<Value: Sendable>: Sendable {
        /// Newest known value; `nil` until an event or a read told it.
        var value: Value?
        var waiters: Set<WaiterID> = []
    }

    struct Waiter: Sendable {
        var device: DeviceKey
        var feeds: Set<Scope>
        /// Global resyncs seen when the waiter registered.
        var resyncs: Int
        var armed: Armed?
    }

    struct Armed: Sendable {
        var positions: [Scope: Int64]
        var scopesVersion: Int64
    }

    package let limits: Limits
    private var feeds: [Scope: Watched<Int64>] = [:]
    private var users: [ExactKey: Watched<Int64>] = [:]
    private var devices: [DeviceKey: Watched<Int64>] = [:]
    private var waiters: [WaiterID: Waiter] = [:]
    private var connections: [ExactKey: Int] = [:]
    /// Since when each lingering waiter lingers after its long-poll answered (the others are held
    /// by a connection). Apart from the waiters so a sweep reads only these.
    private var lingering: [WaiterID: ContinuousClock.Instant] = [:]
    private var lingeringCount: Int { lingering.count }
    private var nextID: WaiterID = 0
    /// Devices that came to have a waiter, and devices whose last waiter went, since the last
    /// ``takePresenceChanges()`` (push nudges skip devices with a live connection); `nil` while
    /// presence is not tracked.
    private var presence: (appeared: Set<DeviceKey>, left: Set<DeviceKey>)?
    /// The global resync epoch as last read, and how many raises of it were seen.
    private var resyncEpoch: Int64?
    private var resyncs = 0

    package init(limits: Limits = .init()) {
        self.limits = limits
    }

    // MARK: Waiters

    /// Registers a waiter before it reads the database; refused over a connection cap.
    package mutating func register(device: DeviceKey, feeds: Set<Scope>) throws(Refusal) -> WaiterID {
        let held = connections[ExactKey(device.userID), default: 0]
        guard held < limits.perUser else { throw .userLimit(limits.perUser) }
        guard waiters.count - lingeringCount < limits.perProcess else { throw .processLimit(limits.perProcess) }
        let id = nextID
        nextID += 1
        connections[ExactKey(device.userID)] = held + 1
        waiters[id] = Waiter(device: device, feeds: [], resyncs: resyncs)
        users[ExactKey(device.userID), default: Watched()].waiters.insert(id)
        if devices[device] == nil, presence != nil, presence!.left.remove(device) == nil { presence!.appeared.insert(device) }
        devices[device, default: Watched()].waiters.insert(id)
        watch(id, feeds: feeds)
        return id
    }

    /// Replaces the feeds a waiter watches (an event stream whose households changed). The feeds
    /// must be watched before the heads the waiter arms with are read.
    package mutating func watch(_ id: WaiterID, feeds newFeeds: Set<Scope>) {
        guard let old = waiters[id]?.feeds else { return }
        for scope in old.subtracting(newFeeds) { forget(id, feed: scope) }
        for scope in newFeeds.subtracting(old) { self.feeds[scope, default: Watched()].waiters.insert(id) }
        waiters[id]?.feeds = newFeeds
    }

    package mutating func remove(_ id: WaiterID) {
        guard let waiter = waiters.removeValue(forKey: id) else { return }
        for scope in waiter.feeds { forget(id, feed: scope) }
        users[ExactKey(waiter.device.userID)]?.waiters.remove(id)
        if users[ExactKey(waiter.device.userID)]?.waiters.isEmpty == true { users[ExactKey(waiter.device.userID)] = nil }
        devices[waiter.device]?.waiters.remove(id)
        if devices[waiter.device]?.waiters.isEmpty == true {
            devices[waiter.device] = nil
            if presence != nil, presence!.appeared.remove(waiter.device) == nil { presence!.left.insert(waiter.device) }
        }
        // A lingering waiter gave its connection back when it began to linger.
        if lingering.removeValue(forKey: id) == nil {
            releaseConnection(of: waiter.device.userID)
        }
    }

    private mutating func releaseConnection(of userID: String) {
        let key = ExactKey(userID)
        let held = connections[key, default: 1] - 1
        connections[key] = held > 0 ? held : nil
    }

    /// The waiter's long-poll answered with nothing new at the positions it is armed with: keep it
    /// armed, without its connection, for the next poll to ``adopt(_:)``. `false` (and nothing
    /// changes) if it is not armed or the process already keeps `limits.perProcess` lingering.
    package mutating func linger(_ id: WaiterID, since now: ContinuousClock.Instant) -> Bool {
        guard let waiter = waiters[id], waiter.armed != nil, lingering[id] == nil, lingeringCount < limits.perProcess else { return false }
        lingering[id] = now
        releaseConnection(of: waiter.device.userID)
        return true
    }

    /// A new poll takes over a lingering waiter, still armed: `true` if nothing passed it since, so
    /// the poll may wait without reading; `false` if it is gone. Over a cap it stays lingering.
    package mutating func adopt(_ id: WaiterID) throws(Refusal) -> Bool {
        guard lingering[id] != nil, let waiter = waiters[id], waiter.armed != nil else { return false }
        let held = connections[ExactKey(waiter.device.userID), default: 0]
        guard held < limits.perUser else { throw .userLimit(limits.perUser) }
        guard waiters.count - lingeringCount < limits.perProcess else { throw .processLimit(limits.perProcess) }
        lingering[id] = nil
        connections[ExactKey(waiter.device.userID)] = held + 1
        return true
    }

    /// The lingering waiters that began lingering before `cutoff` or can no longer be adopted
    /// (something passed them), to ``remove(_:)``.
    package func staleLingering(before cutoff: ContinuousClock.Instant) -> [WaiterID] {
        lingering.compactMap { id, since in
            since < cutoff || waiters[id]?.armed == nil ? id : nil
        }
    }

    private mutating func forget(_ id: WaiterID, feed scope: Scope) {
        feeds[scope]?.waiters.remove(id)
        if feeds[scope]?.waiters.isEmpty == true { feeds[scope] = nil }
    }

    /// Arms a waiter with what its read returned; returns the wake-up due at once if something
    /// newer was already seen since it registered. Positions of unwatched feeds are ignored.
    package mutating func arm(_ id: WaiterID, positions: [Scope: Int64], scopesVersion: Int64) -> Wake? {
        guard let waiter = waiters[id] else { return nil }
        let armed = Armed(positions: positions.filter { waiter.feeds.contains($0.key) }, scopesVersion: scopesVersion)
        var wake = Wake()
        for (scope, position) in armed.positions where (feeds[scope]?.value ?? position) > position {
            wake.advanced.insert(scope)
        }
        if (users[ExactKey(waiter.device.userID)]?.value ?? scopesVersion) > scopesVersion { wake.scopesChanged = true }
        if resyncs > waiter.resyncs { wake.resynchronize = true }
        waiters[id]?.resyncs = resyncs
        if !wake.isEmpty { return wake }
        waiters[id]?.armed = armed
        return nil
    }

    // MARK: Events

    /// A feed committed up to `head`: wakes the armed waiters behind it.
    package mutating func feedAdvanced(_ scope: Scope, head: Int64) -> [WaiterID: Wake] {
        observe(WatchState(heads: [scope: head]))
    }

    /// A user's scopes changed and their scopes version is now `version`.
    package mutating func scopesChanged(userID: String, version: Int64) -> [WaiterID: Wake] {
        observe(WatchState(scopesVersions: [ExactKey(userID): version]))
    }

    /// A job of a watched device finished: its watermark is at least `jobID`.
    package mutating func jobFinished(_ jobID: Int64, device: DeviceKey) {
        guard var entry = devices[device] else { return }
        entry.value = max(entry.value ?? 0, jobID)
        devices[device] = entry
    }

    /// Heads, versions and the resync epoch as notifications told them or the safety net read
    /// them: wakes every armed waiter behind, each once with all its reasons. A raised epoch wakes
    /// every waiter for a full read.
    package mutating func observe(_ state: WatchState) -> [WaiterID: Wake] {
        var wakes: [WaiterID: Wake] = [:]
        for (scope, head) in state.heads {
            guard var feed = feeds[scope], head > (feed.value ?? .min) else { continue }
            feed.value = head
            feeds[scope] = feed
            for id in feed.waiters {
                guard let position = waiters[id]?.armed?.positions[scope], head > position else { continue }
                wakes[id, default: Wake()].advanced.insert(scope)
            }
        }
        for (userID, version) in state.scopesVersions {
            guard var user = users[userID], version > (user.value ?? .min) else { continue }
            user.value = version
            users[userID] = user
            for id in user.waiters {
                guard let armed = waiters[id]?.armed, version > armed.scopesVersion else { continue }
                wakes[id, default: Wake()].scopesChanged = true
            }
        }
        if let epoch = state.resyncEpoch {
            if let known = resyncEpoch, epoch > known {
                resyncs += 1
                for (id, waiter) in waiters where waiter.armed != nil {
                    wakes[id, default: Wake()].resynchronize = true
                }
            }
            resyncEpoch = max(resyncEpoch ?? epoch, epoch)
        }
        // Woken waiters stay unarmed until they have read and arm again (a lingering one can then
        // no longer be adopted: the next poll reads).
        for id in wakes.keys { waiters[id]?.armed = nil }
        return wakes
    }

    // MARK: Reading the table

    /// The newest known head of each of `scopes` that is known.
    package func heads(of scopes: some Sequence<Scope>) -> [Scope: Int64] {
        var heads: [Scope: Int64] = [:]
        for scope in scopes {
            if let head = feeds[scope]?.value { heads[scope] = head }
        }
        return heads
    }

    /// The newest scopes version seen of a watched user (`nil`: none yet).
    package func scopesVersion(of userID: String) -> Int64? {
        users[ExactKey(userID)]?.value
    }

    /// The highest finished job of a watched device seen since it registered (0: none).
    package func watermark(of device: DeviceKey) -> Int64 {
        devices[device]?.value ?? 0
    }

    /// What the safety net reads: every watched feed and user.
    package var watchedFeeds: [Scope] { Array(feeds.keys) }
    package var watchedUsers: [String] { users.keys.map(\.id) }
    /// Waiters a connection holds (lingering ones are not counted).
    package var waiterCount: Int { waiters.count - lingeringCount }

    // MARK: Presence

    /// Starts tracking which devices have a waiter: every device that has one now appears.
    package mutating func trackPresence() {
        guard presence == nil else { return }
        presence = (Set(devices.keys), [])
    }

    /// The devices that came to have a waiter and those whose last waiter went since the last
    /// call (a device that came and went in between is in neither).
    package mutating func takePresenceChanges() -> (appeared: [DeviceKey], left: [DeviceKey]) {
        guard let changes = presence else { return ([], []) }
        presence = ([], [])
        return (Array(changes.appeared), Array(changes.left))
    }

    /// Every device with a waiter (lingering long-polls included: their device polls again).
    package var presentDevices: [DeviceKey] { Array(devices.keys) }
    package var lingeringWaiterCount: Int { lingeringCount }
    package var armedCount: Int { waiters.count(where: { $0.value.armed != nil && lingering[$0.key] == nil }) }
    package func connections(of userID: String) -> Int { connections[ExactKey(userID), default: 0] }
}

/// What live waiters watch, as stored now: feed heads, users' scopes versions and the global
/// resync epoch.
package struct WatchState: Sendable, Hashable {
    package var heads: [Scope: Int64]
    /// By user id's bytes: NFC and NFD "josé" are two users with a version each.
    package var scopesVersions: [ExactKey: Int64]
    /// The global resync epoch (`nil`: not read).
    package var resyncEpoch: Int64?

    package init(heads: [Scope: Int64] = [:], scopesVersions: [ExactKey: Int64] = [:], resyncEpoch: Int64? = nil) {
        self.heads = heads
        self.scopesVersions = scopesVersions
        self.resyncEpoch = resyncEpoch
    }
}
