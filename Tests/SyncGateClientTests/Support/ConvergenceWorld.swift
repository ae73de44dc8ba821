import Foundation
import HummingbirdTesting
import SyncGateStorage
import Synchronization
import SyncGateTestSupport
import Testing

@testable import SyncGateClient

/// One seed of the convergence proof: users with devices (each the SDK on its own SQLite file,
/// behind a ``FaultyTransport``) sharing a household on a real server, driven by a seeded
/// generator through writes of every policy, deletes, syncs, offline periods, membership
/// changes, a purge and a forced resync; then brought to rest and checked against the
/// server's own records.
final class ConvergenceWorld {
    static let users = ["alice", "bob", "carol"]
    static let household = "home"
    /// Types whose every applied write makes exactly one new version (no merges, no server writes).
    static let oneVersionPerWrite: Set<String> = ["weightLogs", "inventory", "recentFoods"]
    /// The query every device observes through the run (half of them on a declared index).
    static let watchedQuery = EntityQuery("inventory").filter(.greaterThanOrEqual("quantity", 6)).sorted(by: "quantity", .descending)

    struct Device {
        let name: String
        let user: String
        let client: SyncClient
        let transport: FaultyTransport
        let events: EventLog
        let collector: Task<Void, Never>
        /// The latest result of ``ConvergenceWorld/watchedQuery`` as the device's observation emitted it.
        let watched: QueryResultBox
        let watcher: Task<Void, Never>
        var offlineUntil = -1
        var live = false
    }

    /// A write as the app made it, and the key the client filed it under.
    struct AppWrite {
        var step: Int
        var device: String
        var key: EntityKey
        var isDelete: Bool
        var idempotencyKey: String?
    }

    /// Entities that were tombstones when the purge ran, and the last job before it: their
    /// versions start again at 1 if they are created again.
    struct PurgeSnapshot {
        var tombstones: [EntityKey: Int64]
        var tombstonesOfUser: [String: [EntityKey: Int64]]
        var lastJobID: Int64
    }

    /// Counts over a run, to show the run exercised what it claims to.
    struct Tally: Sendable {
        var writes = 0
        var syncs = 0
        var faults: [String: Int] = [:]
        var outcomes: [String: Int] = [:]
        var resyncs = 0
        var householdsLeft = 0

        mutating func add(_ other: Tally) {
            writes += other.writes
            syncs += other.syncs
            faults.merge(other.faults, uniquingKeysWith: +)
            outcomes.merge(other.outcomes, uniquingKeysWith: +)
            resyncs += other.resyncs
            householdsLeft += other.householdsLeft
        }
    }

    let http: HTTPHarness
    let seed: UInt64
    let folder: String
    var random: SplitMix64
    var devices: [Device] = []
    var writes: [AppWrite] = []
    var problems: [String] = []
    var purges: [PurgeSnapshot] = []
    var tally = Tally()
    private var markers = 0

    init(http: HTTPHarness, seed: UInt64) throws {
        self.http = http
        self.seed = seed
        random = SplitMix64(seed: seed)
        folder = try temporaryFolder("convergence-\(seed)")
        guard let port = http.client.port else { throw TestEnvironmentError(description: "the harness has no port: use setup .live") }
        let counts = ["alice": 2, "bob": 2, "carol": Int.random(in: 1...2, using: &random)]
        for user in Self.users {
            for index in 1...counts[user]! {
                let name = "\(user)-\(index)"
                let rates = FaultyTransport.Rates(
                    dropAnswer: Double.random(in: 0.05...0.15, using: &random),
                    sendTwice: Double.random(in: 0.03...0.08, using: &random),
                    delay: 0.05
                )
                let transport = FaultyTransport(
                    base: URLSessionTransport(baseURL: URL(string: "http://127.0.0.1:\(port)")!), seed: seed &* 1000 &+ UInt64(devices.count), rates: rates
                )
                var configuration = SyncClient.Configuration(
                    serverURL: URL(string: "http://127.0.0.1:\(port)")!, databasePath: "\(folder)/\(name).sqlite", deviceID: name,
                    token: { try await http.token(user) }
                )
                // Some devices never wait for a push: every batch is a 202 followed at /v1/jobs.
                configuration.pushWait = Bool.random(using: &random) ? .zero : .seconds(5)
                configuration.jobFollowWait = .seconds(5)
                configuration.batchOperations = Int.random(in: 1...20, using: &random)
                configuration.pullPageSize = [3, 50, 500].randomElement(using: &random)!
                configuration.backoff = Backoff(initial: .milliseconds(10), maximum: .milliseconds(200))
                configuration.live.longPollWait = .seconds(2)
                configuration.indexes = Bool.random(using: &random) ? [LocalIndex(type: "inventory", fields: ["quantity"])] : []
                let client = try SyncClient(configuration, transport: transport)
                let events = EventLog()
                let stream = client.events()
                let collector = Task {
                    for await event in stream { events.append(event) }
                }
                let watched = QueryResultBox()
                let results = client.observe(Self.watchedQuery)
                let watcher = Task {
                    do {
                        for try await result in results { watched.value = result }
                    } catch {
                        watched.value = nil
                    }
                }
                devices.append(
                    Device(name: name, user: user, client: client, transport: transport, events: events, collector: collector, watched: watched, watcher: watcher)
                )
            }
        }
    }

    // MARK: - Running

    /// Creates the household (alice, with bob in it), then runs `steps` random steps.
    func run(steps: Int) async throws {
        let owner = devices[0]
        owner.transport.rates = .none
        try await owner.client.createHousehold(Self.household, name: "Home")
        try await owner.client.addMember("bob", to: Self.household)
        try await owner.client.sync()
        owner.transport.rates = FaultyTransport.Rates(dropAnswer: 0.1, sendTwice: 0.05, delay: 0.05)

        let purgeSteps = [Int.random(in: 0..<max(steps / 2, 1), using: &random), Int.random(in: steps / 2..<max(steps, 1), using: &random)]
        let resyncStep = Int.random(in: 0..<max(steps, 1), using: &random)
        if Bool.random(using: &random) {
            let index = Int.random(in: devices.indices, using: &random)
            devices[index].live = true
            devices[index].client.startLive()
        }
        for step in 0..<steps {
            for index in devices.indices where devices[index].offlineUntil == step {
                devices[index].transport.offline = false
            }
            if purgeSteps.contains(step) { try await purgeTombstones() }
            if step == resyncStep {
                try await http.store.store.forceResync(userID: Self.users.randomElement(using: &random)!)
            }
            let device = Int.random(in: devices.indices, using: &random)
            switch Int.random(in: 0..<100, using: &random) {
            case 0..<45:
                await write(on: device, step: step)
            case 45..<70:
                await sync(device)
            case 70..<78:
                devices[device].transport.offline = true
                devices[device].offlineUntil = step + Int.random(in: 2...8, using: &random)
            case 78..<86:
                await changeMembership(on: device, step: step)
            case 86..<93:
                for index in devices.indices { await sync(index) }
            default:
                // A burst: consecutive writes merge in the outbox.
                for _ in 0..<3 { await write(on: device, step: step) }
            }
        }
    }

    /// Brings every device online without faults and syncs them all until nothing moves.
    func quiesce() async throws {
        for index in devices.indices {
            await devices[index].client.stopLive()
            devices[index].transport.offline = false
            devices[index].transport.rates = .none
        }
        for _ in 0..<25 {
            var moved = false
            for device in devices {
                do {
                    let report = try await device.client.sync()
                    tally.syncs += 1
                    if !report.settled.isEmpty || report.pulledChanges > 0 || report.pending > 0 || report.resynced != nil { moved = true }
                } catch {
                    problems.append("\(device.name): sync failed without faults: \(error)")
                    moved = true
                }
            }
            if !moved { return }
        }
        problems.append("the devices did not come to rest within 25 rounds")
    }

    private func sync(_ index: Int) async {
        let device = devices[index]
        do {
            try await device.client.sync()
            tally.syncs += 1
        } catch let error as SyncGateClientError where error.isRetryable {
            // Injected: offline, or an answer lost on the way.
        } catch {
            problems.append("\(device.name): sync failed: \(error)")
        }
    }

    private func marker(_ device: Device) -> JSONValue {
        markers += 1
        return .string("\(device.name)#\(markers)")
    }

    private func write(on index: Int, step: Int) async {
        let device = devices[index]
        let client = device.client
        let marker = marker(device)
        do {
            let write: LocalWrite
            let isDelete: Bool
            switch Int.random(in: 0..<5, using: &random) {
            case 0:  // lww, user scope
                let id = ["w1", "w2"].randomElement(using: &random)!
                isDelete = Int.random(in: 0..<5, using: &random) == 0
                write = isDelete
                    ? try await client.delete(type: "weightLogs", id: id)
                    : try await client.write(type: "weightLogs", id: id, data: ["kg": .double(Double(Int.random(in: 600...900, using: &random)) / 10), "w": marker])
            case 1:  // lww, household scope (refused when the user is not a member)
                let id = ["milk", "eggs", "bread"].randomElement(using: &random)!
                isDelete = Int.random(in: 0..<5, using: &random) == 0
                write = isDelete
                    ? try await client.delete(type: "inventory", id: id, household: Self.household)
                    : try await client.write(
                        type: "inventory", id: id, data: ["name": .string(id), "quantity": .int(Int64.random(in: 0...12, using: &random)), "w": marker],
                        household: Self.household
                    )
            case 2:  // field_merge
                isDelete = false
                var fields: JSONObject = ["w": marker]
                for field in ["calories", "protein", "carbs"] where Bool.random(using: &random) {
                    fields[field] = .int(Int64.random(in: 50...3000, using: &random))
                }
                if try await client.read(type: "userGoals", id: "goals") == nil {
                    write = try await client.write(type: "userGoals", id: "goals", data: fields)
                } else {
                    write = try await client.update(type: "userGoals", id: "goals", fields: fields)
                }
            case 3:  // items_merge (sometimes invalid: no mealType)
                let id = ["f1", "f2"].randomElement(using: &random)!
                isDelete = Int.random(in: 0..<10, using: &random) == 0
                if isDelete {
                    write = try await client.delete(type: "foodLogs", id: id)
                } else {
                    var items: [JSONValue] = []
                    for item in ["i1", "i2", "i3"] where Bool.random(using: &random) {
                        var fields: JSONObject = ["id": .string(item), "calories": .int(Int64.random(in: 50...500, using: &random))]
                        if Bool.random(using: &random) {
                            fields["updatedAt"] = .string("2026-01-15T12:\(Int.random(in: 10...59, using: &random)):00.000Z")
                        }
                        if Int.random(in: 0..<10, using: &random) == 0 { fields["deletedAt"] = "2026-01-15T13:00:00.000Z" }
                        items.append(.object(fields))
                    }
                    var data: JSONObject = ["loggedDate": .string("2026-01-1\(Int.random(in: 5...6, using: &random))"), "items": .array(items), "w": marker]
                    if Int.random(in: 0..<20, using: &random) > 0 { data["mealType"] = "lunch" }
                    write = try await client.write(type: "foodLogs", id: id, data: data)
                }
            default:  // client_wins
                let id = ["r1", "r2"].randomElement(using: &random)!
                isDelete = Int.random(in: 0..<5, using: &random) == 0
                write = isDelete
                    ? try await client.delete(type: "recentFoods", id: id)
                    : try await client.write(type: "recentFoods", id: id, data: ["name": .string(id), "w": marker])
            }
            record(write, on: device, step: step, isDelete: isDelete)
        } catch {
            problems.append("\(device.name): a local write failed: \(error)")
        }
    }

    /// The owner adds or removes bob or carol; a member leaves.
    private func changeMembership(on index: Int, step: Int) async {
        let device = devices[index]
        let client = device.client
        do {
            if device.user == "alice" {
                let member = ["bob", "carol"].randomElement(using: &random)!
                if try await client.read(type: "household_members", id: "\(Self.household):\(member)") != nil {
                    record(try await client.removeMember(member, from: Self.household), on: device, step: step, isDelete: true)
                } else {
                    record(try await client.addMember(member, to: Self.household), on: device, step: step, isDelete: false)
                }
            } else if try await client.read(type: "household_members", id: "\(Self.household):\(device.user)") != nil {
                record(try await client.removeMember(device.user, from: Self.household), on: device, step: step, isDelete: true)
            }
        } catch {
            problems.append("\(device.name): a membership change failed locally: \(error)")
        }
    }

    private func record(_ write: LocalWrite, on device: Device, step: Int, isDelete: Bool) {
        tally.writes += 1
        writes.append(AppWrite(step: step, device: device.name, key: write.key, isDelete: isDelete, idempotencyKey: write.idempotencyKey))
    }

    /// Purges every tombstone (raising the feeds' floors) while nothing is in flight, noting
    /// which entities were tombstones and the last job before the purge.
    private func purgeTombstones() async throws {
        let live = devices.indices.filter { devices[$0].live }
        for index in live { await devices[index].client.stopLive() }
        // Requests the stopped devices gave up on still reach the server: wait for their answers too.
        let transports = devices.map(\.transport)
        try await eventually("no request in flight and the job queue idle", every: .milliseconds(20)) {
            guard transports.allSatisfy({ $0.inFlight == 0 }) else { return false }
            return try await ServerTruth.unfinishedJobs(http) == 0
        }
        var snapshot = PurgeSnapshot(tombstones: [:], tombstonesOfUser: [:], lastJobID: try await ServerTruth.lastJobID(http, users: Self.users))
        for user in Self.users {
            let tombstones = try await ServerTruth.records(http, user: user).filter { $0.value.data == nil }.mapValues(\.version)
            snapshot.tombstonesOfUser[user] = tombstones
            snapshot.tombstones.merge(tombstones) { first, _ in first }
        }
        _ = try await http.store.store.purgeTombstones(olderThanMilliseconds: -1)
        purges.append(snapshot)
        for index in live { devices[index].client.startLive() }
    }

    /// Closes every device and waits for its events.
    func close() async {
        for device in devices {
            await device.client.close()
            await device.collector.value
            device.watcher.cancel()
            await device.watcher.value
        }
        try? FileManager.default.removeItem(atPath: folder)
    }
}

/// The latest result an observed query emitted.
final class QueryResultBox: Sendable {
    private let latest = Mutex<[SyncEntity]?>(nil)

    var value: [SyncEntity]? {
        get { latest.withLock { $0 } }
        set { latest.withLock { $0 = newValue } }
    }
}

/// The events a device reported, in order.
final class EventLog: Sendable {
    private let events = Mutex<[SyncEvent]>([])

    func append(_ event: SyncEvent) {
        events.withLock { $0.append(event) }
    }

    var all: [SyncEvent] { events.withLock { $0 } }

    var outcomes: [WriteOutcome] {
        all.compactMap { if case .writeSettled(let outcome) = $0 { outcome } else { nil } }
    }
}
