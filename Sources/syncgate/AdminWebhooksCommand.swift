import ArgumentParser
import SyncGateServer
import SyncGateStorage
import SyncGateWebhooks
import SyncGateWire

extension AdminCommand {
    /// `syncgate admin webhooks …`: change webhook subscriptions (docs/webhooks.md).
    struct Webhooks: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create, list, pause, resume, replay and delete change webhook subscriptions.",
            subcommands: [Create.self, List.self, Pause.self, Resume.self, Replay.self, Delete.self]
        )

        /// Runs `change` on the subscription `name` and reports it as `verb`; an unknown name is an error.
        /// Makes a change and reports it; `--json` prints the subscription as the API answers
        /// (`deleted`: `{"deleted": name}`, where the API answers 204).
        static func change(_ name: String, _ common: Common, _ verb: String, _ change: @Sendable (SyncStore) async throws -> Bool) async throws {
            let listed = try await common.withStore { store -> [JSONValue]? in
                guard try await change(store) else { return nil }
                return verb == "deleted" ? [] : try await WebhookAdmin.list(in: store)
            }
            guard let listed else { throw ValidationError("no subscription is named '\(name)'") }
            common.report("\(verb) webhook '\(name)'", json: listed.first { $0["name"]?.stringValue == name } ?? [verb: .string(name)])
        }

        struct Create: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Subscribe a receiver URL and print its signing secret (whsec_…); it is shown only this once.")
            @OptionGroup var common: Common
            @Argument(help: "The subscription's name: 1 to 64 characters of A-Z a-z 0-9 . _ -") var name: String
            @Option(help: "The receiver: an http:// or https:// URL") var url: String
            @Option(name: .customLong("type"), help: "Only changes of this entity type (repeatable; default: every type)") var types: [String] = []
            @Option(name: .customLong("event"), help: "created, updated, deleted or membership (repeatable; default: all)") var events: [String] = []

            func run() async throws {
                let configuration = try await common.configuration()
                let events = try WebhookAdmin.events(self.events)
                let (created, secret) = try await common.withStore { store in
                    try await WebhookAdmin.create(
                        in: store, name: name, url: url, entityTypes: types.isEmpty ? nil : Set(types), events: events,
                        allowPrivate: configuration.webhooks.allowPrivateAddresses
                    )
                }
                if common.json {
                    guard case .object(var body) = WebhookAdmin.json(created, backlog: nil) else { return }
                    body["secret"] = .string(secret)
                    print(JSONValue.object(body).serialized())
                } else {
                    print(secret)
                    print("(webhook '\(name)' → \(url): verify its signatures with this secret; it is not shown again)")
                }
            }
        }

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List subscriptions with their pending, failing and delivered messages.")
            @OptionGroup var common: Common

            func run() async throws {
                let listed = try await common.withStore { try await WebhookAdmin.list(in: $0) }
                if common.json {
                    print(JSONValue.object(["webhooks": .array(listed)]).serialized())
                    return
                }
                print("name\turl\tevents\tpending\tfailing\tdelivered\tpaused")
                for item in listed {
                    let events = item["events"]?.arrayValue?.compactMap(\.stringValue).joined(separator: ",") ?? ""
                    let paused = item["paused_reason"]?.stringValue.map { "paused: \($0)" } ?? "-"
                    print([
                        item["name"]?.stringValue ?? "", item["url"]?.stringValue ?? "", events, "\(item["pending"]?.intValue ?? 0)",
                        "\(item["failing"]?.intValue ?? 0)", "\(item["delivered"]?.intValue ?? 0)", paused,
                    ].joined(separator: "\t"))
                }
            }
        }

        struct Pause: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Hold a subscription's deliveries (they keep collecting).")
            @OptionGroup var common: Common
            @Argument(help: "The subscription's name") var name: String

            func run() async throws {
                try await Webhooks.change(name, common, "paused") { try await $0.pauseWebhook(name: name, reason: "paused by an operator") }
            }
        }

        struct Resume: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Send a paused subscription's held deliveries, retries counted afresh.")
            @OptionGroup var common: Common
            @Argument(help: "The subscription's name") var name: String

            func run() async throws {
                try await Webhooks.change(name, common, "resumed") { try await $0.resumeWebhook(name: name) }
            }
        }

        struct Replay: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Send again every message made at or after a time (within the replay window), under its webhook-id; resumes the subscription.")
            @OptionGroup var common: Common
            @Argument(help: "The subscription's name") var name: String
            @Option(help: "An RFC 3339 time, e.g. 2026-11-27T10:00:00Z") var from: String

            func run() async throws {
                guard let start = Timestamp(rfc3339: from) else { throw ValidationError("--from must be an RFC 3339 time, e.g. 2026-11-27T10:00:00Z") }
                guard let count = try await common.withStore({ try await $0.replayWebhook(name: name, from: start) }) else {
                    throw ValidationError("no subscription is named '\(name)'")
                }
                common.report("replaying \(count) message(s) of webhook '\(name)'", json: ["replayed": .int(Int64(count))])
            }
        }

        struct Delete: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Delete a subscription and its messages.")
            @OptionGroup var common: Common
            @Argument(help: "The subscription's name") var name: String

            func run() async throws {
                try await Webhooks.change(name, common, "deleted") { try await $0.deleteWebhook(name: name) }
            }
        }
    }
}
