import Foundation
import SyncGateStorage
import SyncGateTestSupport
import SyncGateWire
import Testing

/// `syncgate admin job show | cancel | retry | delete`, `admin users show | export | erase`,
/// `admin jobs --json` and `admin stats --json`: the admin API's functions and JSON, from a shell.
@Suite(.timeLimit(.minutes(10))) struct AdminJobCommandTests {
    @Test(arguments: Driver.selected)
    func anOperatorShowsCancelsRetriesAndDeletesAJob(_ driver: Driver) async throws {
        let (url, _, cleanup) = try await MigrateCommandTests.database(driver)
        defer { cleanup() }
        func syncgate(_ arguments: String...) async throws -> (status: Int32?, output: String) {
            try await MigrateCommandTests.syncgate(arguments, url: url)
        }
        func json(_ arguments: String...) async throws -> JSONValue {
            let result = try await MigrateCommandTests.syncgate(arguments, url: url)
            #expect(result.status == 0, "\(arguments): \(result.output)")
            return try #require(result.output.split(separator: "\n").compactMap { try? JSONParser().parse(Array($0.utf8)) }.last, "\(result.output)")
        }
        func refused(_ arguments: String..., saying message: String) async throws {
            let result = try await MigrateCommandTests.syncgate(arguments, url: url)
            #expect(result.status != 0 && result.output.contains(message), "\(arguments): \(result.output)")
        }
        #expect(try await syncgate("migrate").status == 0)
        let id = try await StoreHarness.withExisting(url) { try await $0.push([Op.create("weightLogs", "w1", ["kg": 70])]) }

        #expect(try await json("admin", "stats", "--json")["jobs"]?["queued"] == 1)
        #expect(try await json("admin", "jobs", "--json")["jobs"]?[0]?["id"]?.intValue == id)
        let shown = try await json("admin", "job", "show", "\(id)", "--json")
        #expect(shown["operation_list"]?[0]?["entity_id"] == "w1" && shown["state"] == "queued", "\(shown)")
        let text = try await syncgate("admin", "job", "show", "\(id)")
        #expect(text.output.contains("state: queued"), "\(text.output)")

        try await refused("admin", "job", "retry", "\(id)", saying: "only a dead job can be retried")
        try await refused("admin", "job", "delete", "\(id)", saying: "only a finished (done or dead) job can be deleted")
        try await refused("admin", "job", "show", "\(id + 1000)", saying: "no job \(id + 1000)")
        #expect(try await syncgate("admin", "job", "cancel", "\(id)").output.contains("job \(id) cancelled"))
        #expect(try await json("admin", "job", "show", "\(id)", "--json")["state"] == "dead")
        // With --json, an action prints the job as the admin API answers it.
        let retried = try await json("admin", "job", "retry", "\(id)", "--json")
        #expect(retried["id"]?.intValue == id && retried["state"] == "queued" && retried["operation_list"]?[0]?["entity_id"] == "w1", "\(retried)")
        let cancelled = try await json("admin", "job", "cancel", "\(id)", "--json")
        #expect(cancelled["state"] == "dead" && cancelled["attempts"] != nil, "\(cancelled)")
        try await refused("admin", "job", "cancel", "\(id)", saying: "only a queued or retrying job can be cancelled")
        #expect(try await syncgate("admin", "job", "retry", "\(id)").status == 0)
        #expect(try await json("admin", "job", "show", "\(id)", "--json")["state"] == "queued")
        #expect(try await syncgate("admin", "job", "cancel", "\(id)").status == 0)
        #expect(try await syncgate("admin", "job", "delete", "\(id)").status == 0)
        try await refused("admin", "job", "delete", "\(id)", saying: "no job \(id)")
    }

    @Test(arguments: Driver.selected)
    func anOperatorShowsExportsAndErasesAUser(_ driver: Driver) async throws {
        let (url, _, cleanup) = try await MigrateCommandTests.database(driver)
        defer { cleanup() }
        func run(_ arguments: String...) async throws -> (status: Int32?, output: String) {
            try await MigrateCommandTests.syncgate(arguments, url: url)
        }
        #expect(try await run("migrate").status == 0)
        try await StoreHarness.withExisting(url) { harness in
            _ = try await harness.apply([Op.create("weightLogs", "w1", ["kg": 70])], user: "bob")
        }
        let shown = try await run("admin", "users", "show", "bob")
        #expect(shown.status == 0 && shown.output.contains(#""device_id":"d1""#), "\(shown.output)")
        let exported = try await run("admin", "users", "export", "bob")
        let export = exported.output.split(separator: "\n").compactMap { try? JSONParser().parse(Array($0.utf8)) }.first
        #expect(export?["entities"]?[0]?["entity_id"] == "w1", "\(exported.output)")

        let unconfirmed = try await run("admin", "users", "erase", "bob", "--confirm", "alice")
        #expect(unconfirmed.status != 0 && unconfirmed.output.contains("--confirm must repeat the user id"))
        let erased = try await run("admin", "users", "erase", "bob", "--confirm", "bob")
        #expect(erased.status == 0 && erased.output.contains(#""status":"erased""#), "\(erased.output)")
        let after = try await run("admin", "users", "export", "bob")
        #expect(after.output.contains(#""entities":[]"#), "\(after.output)")
    }

    /// Every admin command takes --json and prints one JSON object: where the admin API answers
    /// with a body, the same members (docs/admin.md).
    @Test func everyAdminCommandPrintsJSON() async throws {
        let (url, _, cleanup) = try await MigrateCommandTests.database(.sqlite)
        defer { cleanup() }
        #expect(try await MigrateCommandTests.syncgate(["migrate"], url: url).status == 0)
        try await StoreHarness.withExisting(url) { harness in
            _ = try await harness.apply([Op.create("weightLogs", "w1", ["kg": 70])], user: "bob")
        }
        let commands: [[String]] = [
            ["stats"], ["jobs"], ["job", "show", "1"], ["users", "show", "bob"], ["households"], ["retry-dead", "--all"], ["compact"], ["prune"],
            ["maintain"], ["force-resync", "--user", "bob"], ["recompute-summaries", "--user", "bob"], ["keys", "create", "k", "--scope", "read"],
            ["keys", "list"], ["keys", "revoke", "k"], ["webhooks", "create", "hook", "--url", "http://93.184.216.34/hook"], ["webhooks", "list"],
            ["webhooks", "pause", "hook"], ["webhooks", "resume", "hook"], ["webhooks", "delete", "hook"],
        ]
        // The members the API's answer to the same request has (AdminAPITests and WebhookTests read them).
        let members: [String: Set<String>] = [
            "keys list": ["keys"], "webhooks list": ["webhooks"], "households": ["households", "has_more", "after"], "jobs": ["jobs"],
            "webhooks pause hook": ["name", "url", "paused_at", "pending", "delivered"], "webhooks resume hook": ["name", "url", "paused_at", "pending", "delivered"],
        ]
        for command in commands {
            let result = try await MigrateCommandTests.syncgate(["admin"] + command + ["--json"], url: url)
            let last = result.output.split(separator: "\n").last.map(String.init) ?? ""
            let object = try? JSONParser().parse(Array(last.utf8)).objectValue
            #expect(result.status == 0 && object != nil, "\(command): \(result.output)")
            if let expected = members[command.joined(separator: " ")] {
                #expect(expected.isSubset(of: Set(object?.keys ?? [:].keys)), "\(command): \(result.output)")
            }
        }
    }

    /// A `--user` no token could name, or a day range that ends before it starts, is refused
    /// before anything is written: a typo must not print success over a row made for nobody.
    @Test func adminCommandsRefuseAnImpossibleUserOrDayRange() async throws {
        let (url, _, cleanup) = try await MigrateCommandTests.database(.sqlite)
        defer { cleanup() }
        #expect(try await MigrateCommandTests.syncgate(["migrate"], url: url).status == 0)
        for command in [
            ["force-resync", "--user", ""], ["recompute-summaries", "--user", ""], ["force-resync", "--user", "bad\u{7}id"],
            ["recompute-summaries", "--from", "2026-02-01", "--to", "2026-01-31"],
        ] {
            let result = try await MigrateCommandTests.syncgate(["admin"] + command, url: url)
            #expect(result.status != 0, "\(command): \(result.output)")
            #expect(result.output.contains("--user must be") || result.output.contains("is before --from"), "\(command): \(result.output)")
        }
        let (users, feeds) = try await StoreHarness.withExisting(url) { harness in
            (try await harness.queryTexts("SELECT user_id FROM users"), try await harness.queryTexts("SELECT scope FROM feeds"))
        }
        #expect(users == [] && feeds == [], "\(users) \(feeds)")
    }
}
