import ArgumentParser
import SyncGateCommandLine
import Foundation
import SyncGateCore
import SyncGateWire
import SyncGateServer
import SyncGateStorage
import SyncGateWorker

struct AdminCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admin",
        abstract: "Maintenance and inspection.",
        subcommands: [
            Stats.self, Jobs.self, Job.self, Users.self, RetryDead.self, Compact.self, Prune.self, Maintain.self, ForceResync.self, RecomputeSummaries.self, Households.self,
            Keys.self, Webhooks.self,
        ]
    )

    /// Options every admin command shares.
    struct Common: ParsableArguments {
        @OptionGroup var options: CommonOptions
        @Flag(help: "Print JSON: the admin API's form where it has one (docs/admin.md)") var json = false

        /// Prints `text`, or `value` as one line of JSON with --json.
        func report(_ text: @autoclosure () -> String, json value: @autoclosure () -> JSONValue) {
            print(json ? value().serialized() : text())
        }

        func withStore<Result: Sendable>(_ body: @Sendable (SyncStore) async throws -> Result) async throws -> Result {
            let (configuration, logger) = try await options.configuration()
            return try await OpenStore.with(configuration.database, logger: logger, body)
        }

        func configuration() async throws -> ServerConfiguration {
            try await options.configuration().0
        }
    }

    struct Stats: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Queue depth by state, table sizes, oldest queued job.")
        @OptionGroup var common: Common

        func run() async throws {
            if common.json {
                print(try await common.withStore { try await $0.overview() }.serialized())
                return
            }
            let stats = try await common.withStore { try await $0.stats() }
            for state in JobState.allCases {
                print("jobs.\(state.rawValue)".padding(toLength: 24, withPad: " ", startingAt: 0) + "\(stats.jobsByState[state] ?? 0)")
            }
            let rows: [(String, String)] = [
                ("queue.depth", "\(stats.queueDepth)"),
                ("queue.oldest_age_ms", stats.oldestQueuedAgeMilliseconds.map(String.init) ?? "-"),
                ("entities", "\(stats.entities)"), ("changes", "\(stats.changes)"), ("feeds", "\(stats.feeds)"),
                ("idempotency_records", "\(stats.idempotencyRecords)"), ("households", "\(stats.households)"),
            ]
            for (name, value) in rows { print(name.padding(toLength: 24, withPad: " ", startingAt: 0) + value) }
        }
    }

    struct Jobs: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List recent jobs, newest first.")
        @OptionGroup var common: Common
        @Option(help: "queued, running, retrying, done or dead") var state: String?
        @Option(help: "Only this user's jobs") var user: String?
        @Option(help: "At most this many (1 to 10000)") var limit: Int = 50

        func validate() throws {
            guard (1...10_000).contains(limit) else { throw ValidationError("--limit must be 1 to 10000") }
        }

        func run() async throws {
            var filter = JobFilter(userID: user, limit: limit)
            if let state {
                guard let parsed = JobState(rawValue: state) else { throw ValidationError("unknown state '\(state)'") }
                filter.state = parsed
            }
            let query = filter
            let jobs = try await common.withStore { try await $0.listJobs(query) }
            if common.json {
                print(JSONValue.object(["jobs": .array(jobs.map(\.summaryJSON))]).serialized())
                return
            }
            print("id\tstate\tattempts\toperations\tuser\tdevice\tcreated\tlast_error")
            for job in jobs {
                print([
                    "\(job.id)", job.state.rawValue, "\(job.attempts)/\(job.maximumAttempts)", "\(job.operationCount)", job.userID, job.deviceID,
                    job.createdAt.rfc3339, job.lastError.map { String($0.prefix(120)) } ?? "",
                ].joined(separator: "\t"))
            }
        }
    }

    struct Job: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show, retry, cancel or delete one job (as the admin API does).",
            subcommands: [Show.self, Retry.self, Cancel.self, Delete.self]
        )

        struct Show: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "One job in full: operations, attempts, lease, timings, the last error whole, results.")
            @OptionGroup var common: Common
            @Argument(help: "The job's id") var id: Int64

            func run() async throws {
                let id = self.id
                guard let job = try await common.withStore({ try await $0.jobDetail(id: id) }) else { throw ValidationError("no job \(id)") }
                print(common.json ? job.json.serialized() : Self.text(job.json))
            }

            /// One `key: value` line per field; nested values as JSON.
            static func text(_ value: JSONValue) -> String {
                guard case .object(let object) = value else { return value.serialized() }
                return object.keys.sorted().map { key in
                    let field = object[key]!
                    return "\(key): " + (field.stringValue ?? field.serialized())
                }.joined(separator: "\n")
            }
        }

        struct Retry: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Queue a dead job again with fresh attempts.")
            @OptionGroup var common: Common
            @Argument(help: "The job's id") var id: Int64

            func run() async throws { try await Self.perform(.retry, on: id, common: common) }

            /// Takes `action` and prints what it did, or refuses as the admin API does (404, 409).
            /// `--json` prints the job as the API answers (`delete`: `{"id", "outcome"}`, where the
            /// API answers 204).
            static func perform(_ action: JobAction, on id: Int64, common: Common) async throws {
                let (outcome, detail) = try await common.withStore { store in
                    let outcome = try await store.perform(action, onJob: id, by: "syncgate admin job \(action.rawValue)")
                    return (outcome, outcome == .applied && action != .delete ? try await store.jobDetail(id: id) : nil)
                }
                switch outcome {
                case .applied: common.report("job \(id) \(action.done)", json: detail?.json ?? ["id": .int(id), "outcome": .string(action.done)])
                case .notFound: throw ValidationError("no job \(id)")
                case .refused(let state): throw ValidationError("job \(id) is \(state.rawValue): \(action.rule)")
                case .waitsForLaterJobs: throw ValidationError("job \(id) stays dead: \(JobActionOutcome.laterJobsRule)")
                case .waitsForEarlierJobs: throw ValidationError("job \(id) is not cancelled: \(JobActionOutcome.earlierJobsRule)")
                }
            }
        }

        struct Cancel: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Finish a job no worker has started as dead (its operations answer INTERNAL, retryable: the device may push them again)."
            )
            @OptionGroup var common: Common
            @Argument(help: "The job's id") var id: Int64

            func run() async throws { try await Retry.perform(.cancel, on: id, common: common) }
        }

        struct Delete: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Delete a finished (done or dead) job.")
            @OptionGroup var common: Common
            @Argument(help: "The job's id") var id: Int64

            func run() async throws { try await Retry.perform(.delete, on: id, common: common) }
        }
    }

    struct Users: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "users",
            abstract: "Show a user, export their data, or erase them (as the admin API does).",
            subcommands: [Show.self, Export.self, Erase.self]
        )

        struct Show: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "A user's devices, households, feeds and recent jobs, as JSON.")
            @OptionGroup var common: Common
            @Argument(help: "The user's id") var user: String

            func run() async throws {
                let user = self.user
                print(try await common.withStore { try await $0.userOverview(user) }.serialized())
            }
        }

        struct Export: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "The user's data as one JSON object on standard output.")
            @OptionGroup var common: Common
            @Argument(help: "The user's id") var user: String

            func run() async throws {
                let user = self.user
                try await common.withStore { store in
                    try await store.exportUser(user) { text in FileHandle.standardOutput.write(Data(text.utf8)) }
                }
                print()
            }
        }

        struct Erase: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Erase a user: their jobs, idempotency records, devices, push registrations and own data (docs/admin.md).",
                discussion: """
                    A user still in households first leaves them (archiving those they own) through a job a worker applies; \
                    the command waits for it (up to --timeout), then erases. Their devices resync to nothing at their next pull.
                    """
            )
            @OptionGroup var common: Common
            @Argument(help: "The user's id") var user: String
            @Option(help: "The user's id again: erasing is final") var confirm: String
            @Option(help: "Seconds to wait for a worker to apply the household job") var timeout: Int = 120

            func validate() throws {
                guard confirm.sameBytes(as: user) else { throw ValidationError("--confirm must repeat the user id") }
            }

            func run() async throws {
                let user = self.user
                let deadline = ContinuousClock.now + .seconds(timeout)
                let erased = try await common.withStore { store -> ErasedUser? in
                    // At most a few rounds: each leaves the households the user is still in.
                    for _ in 0..<3 {
                        switch try await store.eraseUser(user) {
                        case .erased(let erased): return erased
                        case .leavingHouseholds(let job):
                            print("leaving households first: job \(job)")
                            // Another process's worker applies it: wait for it to finish.
                            while try await store.job(id: job, userID: user)?.state.isFinished == false {
                                guard ContinuousClock.now < deadline else { return nil }
                                try await Task.sleep(for: .milliseconds(200))
                            }
                        }
                    }
                    return nil
                }
                guard let erased else {
                    throw ValidationError("the user still belongs to households: is a worker running? Run the erase again once their household job finished")
                }
                print(JSONValue.object(["status": "erased", "erased": erased.json]).serialized())
            }
        }
    }

    struct RetryDead: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "retry-dead",
            abstract: "Queue dead jobs again with fresh attempts.",
            discussion: "A retried job applies after jobs its user pushed later, which already ran."
        )
        @OptionGroup var common: Common
        @Option(name: .customLong("job"), help: "A dead job id (repeatable)") var jobs: [Int64] = []
        @Flag(help: "Retry every dead job") var all = false

        func validate() throws {
            guard all != !jobs.isEmpty else { throw ValidationError("give --job ID (repeatable) or --all") }
        }

        func run() async throws {
            let ids = all ? nil : jobs
            let count = try await common.withStore { try await $0.retryDeadJobs(ids: ids) }
            common.report("queued \(count) dead job(s) again", json: ["retried": .int(Int64(count))])
        }
    }

    struct Compact: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete superseded changes from the feeds (keeps each entity's latest change; cursors stay valid)."
        )
        @OptionGroup var common: Common

        func run() async throws {
            let report = try await common.withStore { try await $0.compactFeeds() }
            common.report("deleted \(report.deletedChanges) superseded change(s)", json: ["deleted_changes": .int(Int64(report.deletedChanges))])
        }
    }

    struct Maintain: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run one maintenance pass now, as workers do every minute, and print what it did and how long it took.",
            discussion: "Retention, compaction and the tombstone purge with the configured retention; waits for no other process's pass (one at a time: it says so and does nothing)."
        )
        @OptionGroup var common: Common

        func run() async throws {
            let retention = try await common.configuration().retention
            let outcome = try await common.withStore { try await MaintenanceTasks.runAndRecord(on: $0, retention: retention) }
            guard let (report, duration) = outcome else {
                common.report("another process is running a maintenance pass; nothing done", json: ["ran": false])
                return
            }
            common.report(
                "maintenance pass: \(String(format: "%.1f", duration / .milliseconds(1))) ms; deleted \(report.deletedJobs) finished job(s), "
                    + "forgot \(report.prunedIdempotencyRecords) idempotency record(s), compacted \(report.compaction.deletedChanges) change(s), "
                    + "purged \(report.purge.purgedTombstones) tombstone(s)",
                json: report.json(milliseconds: Int64(duration / .milliseconds(1)))
            )
        }
    }

    struct Prune: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Apply retention: purge old tombstones, forget old idempotency keys, delete old finished jobs.",
            discussion: """
                Durations look like 45s, 90m, 12h or 30d. Without options, all three use the configured
                retention (SYNCGATE_TOMBSTONE_RETENTION, SYNCGATE_IDEMPOTENCY_RETENTION, SYNCGATE_JOB_RETENTION).
                Purging tombstones raises the feed's floor: cursors older than it get 409 CURSOR_INVALID.
                """
        )
        @OptionGroup var common: Common
        @Option(name: .customLong("tombstones-older-than")) var tombstones: String?
        @Option(name: .customLong("idempotency-older-than")) var idempotency: String?
        @Option(name: .customLong("jobs-older-than")) var jobs: String?

        func run() async throws {
            let retention = try await common.configuration().retention
            let none = tombstones == nil && idempotency == nil && jobs == nil
            let tombstoneAge = try tombstones.map { try Self.milliseconds($0, option: "--tombstones-older-than") }
                ?? (none ? retention.tombstonesMilliseconds : nil)
            let idempotencyAge = try idempotency.map { try Self.milliseconds($0, option: "--idempotency-older-than") }
                ?? (none ? retention.idempotencyMilliseconds : nil)
            let jobAge = try jobs.map { try Self.milliseconds($0, option: "--jobs-older-than") }
                ?? (none ? retention.finishedJobsMilliseconds : nil)
            let (lines, counts) = try await common.withStore { store -> ([String], JSONObject) in
                var lines: [String] = []
                var counts: JSONObject = [:]
                if let age = tombstoneAge {
                    let report = try await store.purgeTombstones(olderThanMilliseconds: age)
                    lines.append("purged \(report.purgedTombstones) tombstone(s); raised the floor of \(report.raisedFloors) feed(s)")
                    counts["purged_tombstones"] = .int(Int64(report.purgedTombstones))
                    counts["raised_floors"] = .int(Int64(report.raisedFloors))
                }
                if let age = idempotencyAge {
                    let forgotten = try await store.pruneIdempotencyRecords(olderThanMilliseconds: age)
                    lines.append("forgot \(forgotten) idempotency record(s)")
                    counts["forgotten_idempotency_records"] = .int(Int64(forgotten))
                }
                if let age = jobAge {
                    let deleted = try await store.deleteFinishedJobs(olderThanMilliseconds: age)
                    lines.append("deleted \(deleted) finished job(s)")
                    counts["deleted_jobs"] = .int(Int64(deleted))
                }
                return (lines, counts)
            }
            common.report(lines.joined(separator: "\n"), json: .object(counts))
        }

        static func milliseconds(_ text: String, option: String) throws -> Int64 {
            guard let value = DurationText.milliseconds(text) else {
                throw ValidationError("\(option) must be a duration like 45s, 90m, 12h or 30d, got '\(text)'")
            }
            return value
        }
    }

    struct ForceResync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "force-resync",
            abstract: "Make clients drop their data and pull from the beginning (their next pull answers force_resync: true)."
        )
        @OptionGroup var common: Common
        @Option(help: "The user whose devices resync") var user: String?
        @Flag(help: "Every user (e.g. after a schema change)") var all = false

        func validate() throws {
            guard all != (user != nil) else { throw ValidationError("give --user ID or --all") }
            try user.map(validUser)
        }

        func run() async throws {
            let user = self.user
            try await common.withStore { try await $0.forceResync(userID: user) }
            common.report(user.map { "devices of \($0) will resync" } ?? "every device will resync", json: ["resync": .string(user ?? "*")])
        }
    }

    struct RecomputeSummaries: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "recompute-summaries",
            abstract: "Rebuild daily summaries from food logs (idempotent: writes only summaries that change)."
        )
        @OptionGroup var common: Common
        @OptionGroup var collectionsOption: CollectionsOption
        @Option(help: "Only this user") var user: String?
        @Option(help: "First day, YYYY-MM-DD") var from: String?
        @Option(help: "Last day, YYYY-MM-DD") var to: String?

        func validate() throws {
            try user.map(validUser)
            if let from = try from.map(Self.day), let to = try to.map(Self.day), to < from {
                throw ValidationError("--to \(to.iso8601) is before --from \(from.iso8601)")
            }
        }

        func run() async throws {
            let from = try from.map(Self.day)?.iso8601
            let to = try to.map(Self.day)?.iso8601
            let user = self.user
            let collections = try await common.options.configuration(collectionsOption.flags).0.collections
            let report = try await common.withStore {
                try await $0.recomputeDerived(userID: user, from: from, through: to, collections: collections, now: .now())
            }
            common.report(
                "checked \(report.groupsChecked) day(s); wrote \(report.written) summary change(s)",
                json: ["days_checked": .int(Int64(report.groupsChecked)), "written": .int(Int64(report.written))]
            )
        }

        static func day(_ text: String) throws -> CalendarDate {
            guard let date = CalendarDate(iso8601: text) else { throw ValidationError("'\(text)' is not a YYYY-MM-DD date") }
            return date
        }
    }

    struct Households: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List households and their members.")
        @OptionGroup var common: Common
        @Option(help: "Only households this user belongs to") var user: String?
        @Option(help: "List the households whose ids sort after this one (the last page's `after`)") var after: String?
        @Option(help: "At most this many households (1–1000)") var limit = 100

        func validate() throws {
            guard (1...1000).contains(limit) else { throw ValidationError("--limit must be between 1 and 1000") }
        }

        func run() async throws {
            let (user, after, limit) = (self.user, self.after, self.limit)
            let page = try await common.withStore { try await $0.householdPage(userID: user, after: after, limit: limit) }
            if common.json {
                print(page.json.serialized())
                return
            }
            for household in page.households {
                let members = household.members.sorted { $0.key < $1.key }.map { "\($0.key) (\($0.value.rawValue))" }
                print("\(household.id)\towner=\(household.ownerID)\t\(household.archived ? "archived" : "active")\t\(members.joined(separator: ", "))")
            }
            if page.households.isEmpty { print("no households") }
            if case .string(let next)? = page.json["after"] { print("more follow: --after \(next)") }
        }
    }
}

/// Refuses a `--user` that no token could name (an empty one, say): `token` issues none for it,
/// and the admin commands write no row for it.
func validUser(_ user: String) throws {
    guard IdentifierLimits.isValidUserID(user) else { throw ValidationError("--user must be 1 to 128 characters without control characters") }
}
