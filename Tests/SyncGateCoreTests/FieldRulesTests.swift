import Testing

@testable import SyncGateCore
import SyncGateWire

@Suite(.timeLimit(.minutes(10))) struct FieldRulesTests {
    typealias FieldType = EntityTypeConfig.FieldType

    static let samples: [(JSONValue, Set<FieldType>)] = [
        ("text", [.string]),
        ("2026-01-15", [.string, .date]),
        ("2026-01-15T10:00:00Z", [.string, .timestamp]),
        ("2026-02-30", [.string]),
        (7, [.number, .integer]),
        (7.0, [.number, .integer]),
        (7.5, [.number]),
        (true, [.boolean]),
        (["a": 1], [.object]),
        ([1, 2], [.array]),
    ]

    @Test func eachTypeAcceptsExactlyItsValues() {
        for (value, accepted) in Self.samples {
            for type in FieldType.allCases {
                #expect(FieldRules.matches(value, type) == accepted.contains(type), "\(value) as \(type)")
            }
        }
    }

    static let timeEntries = EntityTypeConfig(
        name: "timeEntries",
        fields: [.init(name: "project_id", type: .string, required: true), .init(name: "minutes", type: .number, required: true), .init(name: "note", type: .string, required: false)]
    )

    @Test(arguments: [
        (["project_id": "p", "minutes": 30] as JSONObject, nil as String?),
        (["project_id": "p", "minutes": 30, "note": "x"], nil),
        (["project_id": "p", "minutes": 30, "note": nil], nil),
        (["project_id": "p", "minutes": "30"], "field 'minutes' must be a number"),
        (["project_id": "p"], "field 'minutes' is required"),
        (["project_id": nil, "minutes": 1], "field 'project_id' is required"),
        (["project_id": 5, "minutes": 1], "field 'project_id' must be a string"),
        (["project_id": "p", "minutes": 1, "note": 5], "field 'note' must be a string"),
    ])
    func reportsTheFirstViolatedRule(_ document: JSONObject, _ expected: String?) {
        #expect(FieldRules.violation(in: document, of: Self.timeEntries) == expected)
    }
}
