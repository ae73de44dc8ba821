import ArgumentParser
import SyncGateHTTP
import SyncGateStorage
import SyncGateWire

extension AdminCommand {
    /// `syncgate admin keys …`: the service keys of an app's own backend (docs/service-api.md).
    struct Keys: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create, list and revoke service keys (the credentials of your own backend).",
            subcommands: [Create.self, List.self, Revoke.self]
        )

        struct Create: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Create a service key and print it; it is shown only this once (only its hash is stored).")
            @OptionGroup var common: Common
            @Argument(help: "The key's name: 1 to 64 characters of A-Z a-z 0-9 . _ - (logs and changes name it)") var name: String
            @Option(name: .customLong("scope"), help: "read, write or admin (repeatable; at least one)") var scopes: [String] = []
            @Option(name: .customLong("user"), help: "A user the key may act for (repeatable; with --household, none given: everyone)") var users: [String] = []
            @Option(name: .customLong("household"), help: "A household the key may act for, as its owner (repeatable)") var households: [String] = []

            var reach: ServiceReach? {
                users.isEmpty && households.isEmpty ? nil : ServiceReach(users: Set(users), households: Set(households))
            }

            func validate() throws {
                guard NewServiceKey.isValidName(name) else { throw ValidationError("a key's name is 1 to 64 characters of A-Z a-z 0-9 . _ -") }
                guard !scopes.isEmpty else { throw ValidationError("give at least one --scope (read, write or admin)") }
                for scope in scopes where ServiceScope(rawValue: scope) == nil {
                    throw ValidationError("unknown scope '\(scope)': read, write or admin")
                }
                if let refusal = NewServiceKey.refusal(scopes: Set(scopes.compactMap(ServiceScope.init)), reach: reach) { throw ValidationError(refusal) }
            }

            func run() async throws {
                let (key, stored) = ServiceKeySecret.new(name: name, scopes: Set(scopes.compactMap(ServiceScope.init)), reach: reach)
                guard try await common.withStore({ try await $0.createServiceKey(stored) }) else {
                    throw ValidationError("a key named '\(name)' exists (revoked keys keep their names); choose another name")
                }
                if common.json {
                    let body: JSONObject = [
                        "name": .string(name), "key": .string(key), "scopes": .array(stored.scopes.sorted().map { .string($0.rawValue) }),
                        "reach": reach?.json ?? .null,
                    ]
                    print(JSONValue.object(body).serialized())
                } else {
                    print(key)
                    let reached = reach.map { " for \(Self.describe($0))" } ?? ""
                    print("(service key '\(name)', scopes \(ServiceScope.stored(stored.scopes))\(reached): store it now, it is not shown again)")
                }
            }

            /// `users a, b; households h` as a listing shows a reach.
            static func describe(_ reach: ServiceReach) -> String {
                [("users", reach.users), ("households", reach.households)].filter { !$0.1.isEmpty }
                    .map { "\($0.0) \($0.1.sorted().joined(separator: ", "))" }.joined(separator: "; ")
            }
        }

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List service keys (never the keys themselves), revoked ones too.")
            @OptionGroup var common: Common

            func run() async throws {
                let keys = try await common.withStore { try await $0.serviceKeys() }
                if common.json {
                    print(JSONValue.object(["keys": .array(keys.map(\.json))]).serialized())
                    return
                }
                print("name\thint\tscopes\treach\tcreated\trevoked")
                for key in keys {
                    let reach = key.reach.map(Create.describe) ?? "everyone"
                    print([key.name, "…" + key.hint, ServiceScope.stored(key.scopes), reach, key.createdAt.rfc3339, key.revokedAt?.rfc3339 ?? "-"].joined(separator: "\t"))
                }
            }
        }

        struct Revoke: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Revoke a service key: every front refuses it within 5 seconds.")
            @OptionGroup var common: Common
            @Argument(help: "The key's name") var name: String

            func run() async throws {
                guard try await common.withStore({ try await $0.revokeServiceKey(name: name) }) else {
                    throw ValidationError("no valid key is named '\(name)'")
                }
                common.report("revoked service key '\(name)'", json: ["revoked": .string(name)])
            }
        }
    }
}
