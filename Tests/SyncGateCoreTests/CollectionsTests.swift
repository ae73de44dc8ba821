import Foundation
import Testing

@testable import SyncGateCore
import SyncGateWire

@Suite(.timeLimit(.minutes(10))) struct CollectionsTests {
    @Test func theDefaultServesTheReferenceApps() throws {
        let collections = Collections.default
        let expected: [(String, EntityTypeConfig.ScopeKind, EntityTypeConfig.Policy)] = [
            ("foodLogs", .user, .itemsMerge), ("weightLogs", .user, .lww), ("userGoals", .user, .fieldMerge),
            ("recentFoods", .user, .clientWins), ("dailySummaries", .user, .serverWins), ("visitedPlaces", .user, .fieldMerge),
            ("categories", .user, .lww), ("inventory", .household, .lww), ("groceryList", .household, .lww),
            ("projects", .user, .lww), ("timeEntries", .user, .lww), ("contacts", .user, .lww),
            ("households", .household, .lww), ("household_members", .household, .lww),
        ]
        #expect(collections.types.count == expected.count)
        for (name, scope, policy) in expected {
            let type = try #require(collections[name], "\(name)")
            #expect(type.scope == scope, "\(name)")
            #expect(type.policy == policy, "\(name)")
        }
        #expect(collections["categories"]?.ties == .client)
        #expect(collections["weightLogs"]?.ties == .server)
        #expect(collections["dailySummaries"]?.readOnly == true)
        #expect(collections["foodLogs"]?.items == .init())
        #expect(collections["foodLogs"]?.fields.filter(\.required).map(\.name).sorted() == ["loggedDate", "mealType"])
        #expect(collections["foodLogs"]?.fields.first { $0.name == "loggedDate" }?.type == .date)
        #expect(collections["timeEntries"]?.parent == .init(parentType: "projects", referenceField: "project_id", archivedField: "archived", errorCode: "PROJECT_ARCHIVED"))
        #expect(collections["timeEntries"]?.fields.map(\.name).sorted() == ["minutes", "project_id"])
    }

    @Test func theShippedExampleFileIsTheBuiltInDefault() throws {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../config/collections.yaml")
        let text = try String(contentsOf: file, encoding: .utf8)
        #expect(text == Collections.defaultYAML, "regenerate Collections+Default.swift from config/collections.yaml (scripts/embed-resources)")
    }

    @Test func parsesEveryKey() throws {
        let collections = try Collections.parse(
            yaml: """
                types:
                  lists:
                    scope: household
                    policy: items_merge
                    ties: client
                    items: {path: lines, id_field: key, updated_at_field: at, deleted_at_field: gone}
                    fields:
                      title: {type: string, required: true}
                      due: {type: timestamp}
                  tasks:
                    scope: household
                    read_only: true
                    parent: {type: lists, field: list_id}
                """,
            source: "test.yaml"
        )
        let lists = try #require(collections["lists"])
        #expect(lists.scope == .household)
        #expect(lists.ties == .client)
        #expect(lists.items == .init(path: "lines", idField: "key", updatedAtField: "at", deletedAtField: "gone"))
        #expect(lists.fields == [.init(name: "due", type: .timestamp, required: false), .init(name: "title", type: .string, required: true)])
        let tasks = try #require(collections["tasks"])
        #expect(tasks.readOnly && tasks.policy == .lww)
        #expect(tasks.parent == .init(parentType: "lists", referenceField: "list_id"))
    }

    @Test(arguments: [
        ("types: [1]", "f.yaml: key 'types' must be a non-empty mapping"),
        ("other: 1", "f.yaml: unknown key 'other'"),
        ("types:\n  a: {policy: nope}", "f.yaml: type 'a': key 'policy': 'nope' is not one of lww, client_wins, server_wins, field_merge, items_merge"),
        ("types:\n  a: {scope: team}", "f.yaml: type 'a': key 'scope': 'team' is not one of user, household"),
        ("types:\n  a: {polcy: lww}", "f.yaml: type 'a': unknown key 'polcy'"),
        ("types:\n  a: {policy: server_wins, ties: client}", "f.yaml: type 'a': key 'ties': only lww, field_merge and items_merge"),
        ("types:\n  a: {items: {path: x}}", "f.yaml: type 'a': key 'items': only an items_merge type"),
        ("types:\n  a: {read_only: maybe}", "f.yaml: type 'a': key 'read_only': expected true or false"),
        ("types:\n  a: {fields: {x: {type: uuid}}}", "f.yaml: type 'a': key 'fields.x': key 'type': 'uuid' is not one of"),
        ("types:\n  a: {fields: {x: {required: true}}}", "f.yaml: type 'a': key 'fields.x': key 'type' is required"),
        ("types:\n  a: {fields: {x: string}}", "f.yaml: type 'a': key 'fields.x': expected a mapping"),
        ("types:\n  a: {parent: {type: b, field: b_id}}", "f.yaml: type 'a': key 'parent.type': unknown entity type 'b'"),
        ("types:\n  a: {parent: {type: b}}\n  b: {}", "f.yaml: type 'a': key 'parent': key 'field' is required"),
        ("types:\n  a: {parent: {type: b, field: x, error_code: bad-code}}\n  b: {}", "f.yaml: type 'a': key 'parent': key 'error_code'"),
        ("types:\n  a: {scope: household, parent: {type: b, field: x}}\n  b: {}", "f.yaml: type 'a': key 'parent.type': the parent 'b' must have the same scope"),
        ("types:\n  households: {}", "f.yaml: type 'households': the name is reserved"),
        ("types:\n  bad-name: {}", "f.yaml: type 'bad-name': a type name is"),
        ("types:\n  a: [", "f.yaml: not valid YAML"),
    ])
    func badFilesNameTheFileTypeAndKey(_ yaml: String, _ message: String) {
        let error = #expect(throws: ConfigurationError.self) { try Collections.parse(yaml: yaml, source: "f.yaml") }
        #expect(error?.message.hasPrefix(message) == true, "\(error?.message ?? "no error")")
    }
}
