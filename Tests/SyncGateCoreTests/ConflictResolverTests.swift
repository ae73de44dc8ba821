import Testing

@testable import SyncGateCore
import SyncGateWire

/// Every row of PROTOCOL.md's conflict-policy list, for every policy it applies to.
@Suite(.timeLimit(.minutes(10))) struct ConflictResolverTests {
    typealias F = Fixture
    static let policies = EntityTypeConfig.Policy.allCases

    // MARK: no entity

    @Test(arguments: policies)
    func createOnNothingAppliesAsVersionOne(_ policy: EntityTypeConfig.Policy) throws {
        let decision = F.resolve(F.operation(.create, base: 0, data: ["title": "new"]), nil, F.type(policy))
        let state = try #require(decision.written)
        #expect(decision.status == .applied)
        #expect(state.version == 1)
        #expect(state.data == ["title": "new"])
        #expect(state.clientTimestamp == F.now)
        #expect(state.updatedAt == F.now)
    }

    @Test(arguments: policies, [SyncOperation.Intent.update, .delete])
    func updateOrDeleteOnNothingIsEntityNotFound(_ policy: EntityTypeConfig.Policy, _ intent: SyncOperation.Intent) {
        #expect(F.resolve(F.operation(intent, base: 0), nil, F.type(policy)).rejection == .entityNotFound)
    }

    @Test(arguments: policies)
    func createOnNothingWithABaseVersionIsInvalid(_ policy: EntityTypeConfig.Policy) {
        #expect(F.resolve(F.operation(.create, base: 2), nil, F.type(policy)).rejection == .validationError)
    }

    // MARK: b > v

    @Test(arguments: policies, SyncOperation.Intent.allCases)
    func baseAheadOfTheServerIsInvalid(_ policy: EntityTypeConfig.Policy, _ intent: SyncOperation.Intent) {
        #expect(F.resolve(F.operation(intent, base: 4), F.entity(), F.type(policy)).rejection == .validationError)
        #expect(F.resolve(F.operation(intent, base: 4), F.entity(data: nil), F.type(policy)).rejection == .validationError)
    }

    // MARK: tombstones

    @Test(arguments: policies.filter { $0 != .clientWins }, [SyncOperation.Intent.create, .update])
    func deletesWinAgainstWritesToATombstone(_ policy: EntityTypeConfig.Policy, _ intent: SyncOperation.Intent) {
        for base: Int64 in [0, 2, 3] {
            let decision = F.resolve(F.operation(intent, base: base, at: 3600), F.entity(data: nil), F.type(policy))
            #expect(decision == .keep(status: .conflict(.serverWins)))
        }
    }

    @Test(arguments: policies)
    func deletingATombstoneChangesNothing(_ policy: EntityTypeConfig.Policy) {
        #expect(F.resolve(F.operation(.delete, base: 3), F.entity(data: nil), F.type(policy)) == .keep(status: .conflict(.serverWins)))
    }

    @Test func clientWinsRevivesATombstone() throws {
        let stale = F.resolve(F.operation(.update, base: 2, data: ["title": "back"]), F.entity(data: nil), F.type(.clientWins))
        #expect(stale.status == .conflict(.clientWins))
        #expect(stale.written?.version == 4)
        #expect(stale.written?.data == ["title": "back"])
        let current = F.resolve(F.operation(.create, base: 3, data: ["title": "again"]), F.entity(data: nil), F.type(.clientWins))
        #expect(current.status == .applied)
        #expect(current.written?.data == ["title": "again"])
    }

    // MARK: b == v

    @Test(arguments: policies)
    func currentUpdatePatchesTopLevelFields(_ policy: EntityTypeConfig.Policy) throws {
        let decision = F.resolve(F.operation(.update, base: 3, data: ["title": "client", "body": nil, "extra": 1], at: -3600), F.entity(), F.type(policy))
        let state = try #require(decision.written)
        #expect(decision.status == .applied)
        #expect(state.version == 4)
        #expect(state.data == ["title": "client", "extra": 1])
        // Even an old client timestamp applies when the client saw the current version.
        #expect(state.clientTimestamp == F.at(-3600))
    }

    @Test(arguments: policies)
    func currentCreateReplacesTheDocument(_ policy: EntityTypeConfig.Policy) {
        let decision = F.resolve(F.operation(.create, base: 3, data: ["only": true]), F.entity(), F.type(policy))
        #expect(decision.status == .applied)
        #expect(decision.written?.data == ["only": true])
    }

    @Test(arguments: policies)
    func currentDeleteLeavesATombstone(_ policy: EntityTypeConfig.Policy) throws {
        let decision = F.resolve(F.operation(.delete, base: 3), F.entity(), F.type(policy))
        let state = try #require(decision.written)
        #expect(decision.status == .applied)
        #expect(state.version == 4)
        #expect(state.isDeleted)
    }

    // MARK: stale, lww

    @Test(arguments: [SyncOperation.Intent.create, .update, .delete])
    func lwwLaterClientTimestampWins(_ intent: SyncOperation.Intent) {
        let decision = F.resolve(F.operation(intent, base: 1, data: ["title": "client"], at: -30), F.entity(at: -60), F.type(.lww))
        #expect(decision.status == .conflict(.clientWins))
        #expect(decision.written?.version == 4)
        #expect(decision.written?.clientTimestamp == F.at(-30))
    }

    @Test(arguments: [SyncOperation.Intent.create, .update, .delete])
    func lwwEarlierClientTimestampLoses(_ intent: SyncOperation.Intent) {
        #expect(F.resolve(F.operation(intent, base: 1, at: -90), F.entity(at: -60), F.type(.lww)) == .keep(status: .conflict(.serverWins)))
    }

    @Test func lwwTiesGoToTheServerUnlessTheTypeSaysClient() {
        let tie = F.operation(.update, base: 1, at: -60)
        #expect(F.resolve(tie, F.entity(at: -60), F.type(.lww)) == .keep(status: .conflict(.serverWins)))
        #expect(F.resolve(tie, F.entity(at: -60), F.type(.lww, ties: .client)).status == .conflict(.clientWins))
    }

    @Test func lwwClampsClientClocksMoreThanFiveMinutesAhead() {
        // The server's write was stamped 2 minutes ahead (within the allowed skew).
        let server = F.entity(at: 120)
        // A client an hour ahead counts as the server clock (now), which is earlier: it loses.
        #expect(F.resolve(F.operation(.update, base: 1, at: 3600), server, F.type(.lww)) == .keep(status: .conflict(.serverWins)))
        // Exactly five minutes ahead is not clamped: it wins.
        #expect(F.resolve(F.operation(.update, base: 1, at: 300), server, F.type(.lww)).status == .conflict(.clientWins))
        // The stored timestamp of a clamped write is the server clock.
        let created = F.resolve(F.operation(.create, base: 0, at: 3600), nil, F.type(.lww))
        #expect(created.written?.clientTimestamp == F.now)
    }

    @Test func effectiveTimestampBoundary() {
        #expect(ConflictResolver.effectiveTimestamp(F.now.adding(milliseconds: 300_000), now: F.now) == F.now.adding(milliseconds: 300_000))
        #expect(ConflictResolver.effectiveTimestamp(F.now.adding(milliseconds: 300_001), now: F.now) == F.now)
        #expect(ConflictResolver.effectiveTimestamp(F.at(-86_400), now: F.now) == F.at(-86_400))
    }

    // MARK: stale, client_wins and server_wins

    @Test(arguments: SyncOperation.Intent.allCases)
    func clientWinsAppliesInArrivalOrder(_ intent: SyncOperation.Intent) {
        let decision = F.resolve(F.operation(intent, base: 1, at: -3600), F.entity(at: -60), F.type(.clientWins))
        #expect(decision.status == .conflict(.clientWins))
        #expect(decision.written?.version == 4)
    }

    @Test(arguments: SyncOperation.Intent.allCases)
    func serverWinsKeepsTheServerDocument(_ intent: SyncOperation.Intent) {
        #expect(F.resolve(F.operation(intent, base: 1, at: 3000), F.entity(at: -60), F.type(.serverWins)) == .keep(status: .conflict(.serverWins)))
    }

    // MARK: stale, field_merge

    func fieldMergeEntity() -> EntityState {
        // title changed at version 3 (at -60 s), body at version 1 (at -600 s).
        F.entity(
            version: 3,
            data: ["title": "server", "body": "b"],
            at: -60,
            meta: EntityMeta(fields: ["title": .init(version: 3, timestamp: F.at(-60)), "body": .init(version: 1, timestamp: F.at(-600))])
        )
    }

    @Test func fieldMergeAppliesFieldsUnchangedSinceTheBase() throws {
        let decision = F.resolve(F.operation(.update, base: 2, data: ["body": "client", "new": 1], at: -3600), fieldMergeEntity(), F.type(.fieldMerge))
        let state = try #require(decision.written)
        #expect(decision.status == .applied)
        #expect(state.data == ["title": "server", "body": "client", "new": 1])
        #expect(state.meta.fields["body"] == FieldStamp(version: 4, timestamp: F.at(-3600)))
        #expect(state.meta.fields["title"] == FieldStamp(version: 3, timestamp: F.at(-60)))
    }

    @Test func fieldMergeLaterTimestampWinsAConflictingField() throws {
        let later = F.resolve(F.operation(.update, base: 2, data: ["title": "client", "body": "c"], at: -30), fieldMergeEntity(), F.type(.fieldMerge))
        #expect(later.status == .conflict(.merged))
        #expect(later.written?.data == ["title": "client", "body": "c"])

        let earlier = F.resolve(F.operation(.update, base: 2, data: ["title": "client", "body": "c"], at: -90), fieldMergeEntity(), F.type(.fieldMerge))
        #expect(earlier.status == .conflict(.merged))
        #expect(earlier.written?.data == ["title": "server", "body": "c"])
    }

    @Test func fieldMergeThatKeepsEverythingWritesNothing() {
        let decision = F.resolve(F.operation(.update, base: 2, data: ["title": "client"], at: -90), fieldMergeEntity(), F.type(.fieldMerge))
        #expect(decision == .keep(status: .conflict(.merged)))
    }

    @Test func fieldMergeTiesFollowTheType() {
        let tie = F.operation(.update, base: 2, data: ["title": "client"], at: -60)
        #expect(F.resolve(tie, fieldMergeEntity(), F.type(.fieldMerge)).isKeep)
        #expect(F.resolve(tie, fieldMergeEntity(), F.type(.fieldMerge, ties: .client)).written?.data?["title"] == "client")
    }

    @Test func fieldMergeNullRemovesAFieldAndStampsIt() throws {
        let state = try #require(F.resolve(F.operation(.update, base: 2, data: ["body": nil]), fieldMergeEntity(), F.type(.fieldMerge)).written)
        #expect(state.data == ["title": "server"])
        #expect(state.meta.fields["body"]?.version == 4)
    }

    @Test func fieldMergeStaleDeleteWins() {
        let decision = F.resolve(F.operation(.delete, base: 1, at: -3600), fieldMergeEntity(), F.type(.fieldMerge))
        #expect(decision.status == .conflict(.clientWins))
        #expect(decision.written?.isDeleted == true)
    }

    @Test func fieldMergeWithoutStampsTreatsFieldsAsCurrent() {
        // Data written before the type became field_merge has no stamps: timestamps decide.
        let unstamped = F.entity(version: 3, data: ["title": "server"], at: -60)
        #expect(F.resolve(F.operation(.update, base: 2, data: ["title": "c"], at: -90), unstamped, F.type(.fieldMerge)).isKeep)
        #expect(F.resolve(F.operation(.update, base: 2, data: ["title": "c"], at: -30), unstamped, F.type(.fieldMerge)).status == .conflict(.merged))
    }

    @Test func fieldMergeStampsEveryFieldOnCreate() {
        let state = F.resolve(F.operation(.create, base: 0, data: ["a": 1, "b": 2]), nil, F.type(.fieldMerge)).written
        #expect(state?.meta.fields == ["a": .init(version: 1, timestamp: F.now), "b": .init(version: 1, timestamp: F.now)])
    }

    // MARK: stale, items_merge

    static let itemsType = EntityTypeConfig(name: "notes", policy: .itemsMerge)

    func item(_ id: String, _ name: String, updated seconds: Int64, deleted: Int64? = nil) -> JSONValue {
        var object: JSONObject = ["id": .string(id), "name": .string(name), "updatedAt": .string(F.at(seconds).rfc3339)]
        if let deleted { object["deletedAt"] = .string(F.at(deleted).rfc3339) }
        return .object(object)
    }

    func itemsEntity() -> EntityState {
        F.entity(
            version: 3,
            data: ["mealType": "lunch", "items": [item("a", "apple", updated: -100), item("b", "bread", updated: -100)]],
            at: -60
        )
    }

    @Test func itemsMergeKeepsTheLaterCopyOfEachItem() throws {
        let incoming: JSONObject = ["items": [item("a", "APPLE", updated: -50), item("b", "BREAD", updated: -200), item("c", "cheese", updated: -10)]]
        let decision = F.resolve(F.operation(.update, base: 2, data: incoming, at: -90), itemsEntity(), Self.itemsType)
        let state = try #require(decision.written)
        #expect(decision.status == .conflict(.merged))
        #expect(state.version == 4)
        #expect(state.data?["items"] == [item("a", "APPLE", updated: -50), item("b", "bread", updated: -100), item("c", "cheese", updated: -10)])
        // Top-level fields follow lww: the client's timestamp (-90) is earlier than the server's (-60).
        #expect(state.data?["mealType"] == "lunch")
    }

    @Test func itemsMergeTopLevelFieldsFollowLastWriteWins() {
        let decision = F.resolve(F.operation(.update, base: 2, data: ["mealType": "dinner"], at: -30), itemsEntity(), Self.itemsType)
        #expect(decision.written?.data?["mealType"] == "dinner")
        #expect(decision.written?.data?["items"] == itemsEntity().data?["items"])
    }

    @Test func itemsMergeDropsDeletedItemsAndRemembersThem() throws {
        let deleting: JSONObject = ["items": [item("b", "bread", updated: -100, deleted: -40)]]
        let state = try #require(F.resolve(F.operation(.update, base: 2, data: deleting, at: -40), itemsEntity(), Self.itemsType).written)
        #expect(state.data?["items"] == [item("a", "apple", updated: -100)])
        #expect(state.meta.itemTombstones["b"] == F.at(-40))

        // A stale copy of the deleted item (edited before the delete) does not come back ...
        let stale: JSONObject = ["items": [item("b", "bread!", updated: -45)]]
        #expect(F.resolve(F.operation(.update, base: 3, data: stale, at: -30), state, Self.itemsType) == .keep(status: .conflict(.merged)))
        // ... but an edit made after the delete does.
        let newer: JSONObject = ["items": [item("b", "bread again", updated: -20)]]
        let revived = try #require(F.resolve(F.operation(.update, base: 3, data: newer, at: -20), state, Self.itemsType).written)
        #expect(revived.data?["items"] == [item("a", "apple", updated: -100), item("b", "bread again", updated: -20)])
    }

    /// An item without `updatedAt` counts as written when its operation was, even after later
    /// operations move the entity's own timestamp on: a delete made after it still removes it, and
    /// an older copy still loses to it. (Before item times were kept, the stored item took the
    /// entity's latest timestamp and the outcome depended on the order pushes arrived in.)
    @Test func anItemWithoutUpdatedAtKeepsTheTimeItWasWritten() throws {
        let created = try #require(F.resolve(F.operation(.create, base: 0, data: ["items": [["id": "x", "n": 1]]], at: -100), nil, Self.itemsType).written)
        #expect(created.meta.itemTimes == ["x": F.at(-100)])
        // Another item, at a later time: the entity's timestamp moves to -10.
        let later = try #require(F.resolve(F.operation(.update, base: 0, data: ["items": [item("y", "y", updated: -10)]], at: -10), created, Self.itemsType).written)
        #expect(later.clientTimestamp == F.at(-10))
        #expect(later.meta.itemTimes == ["x": F.at(-100)])
        // A delete of x made at -50, after x was written (-100) though before the entity's time (-10).
        let deleting: JSONObject = ["items": [["id": "x", "deletedAt": .string(F.at(-50).rfc3339)]]]
        let deleted = try #require(F.resolve(F.operation(.update, base: 0, data: deleting, at: -50), later, Self.itemsType).written)
        #expect(deleted.data?["items"] == [item("y", "y", updated: -10)])
        #expect(deleted.meta.itemTimes == [:])
        // And a copy of x edited at -120 (before it was written) loses to the stored one.
        let older: JSONObject = ["items": [item("x", "old", updated: -120)]]
        #expect(F.resolve(F.operation(.update, base: 0, data: older, at: -5), later, Self.itemsType) == .keep(status: .conflict(.merged)))
    }

    /// Item times come from clients too: one more than five minutes ahead counts as the server's
    /// clock, as an operation's does, and keeps counting so at later merges (the item's own
    /// field still says the future). A clock a year ahead would otherwise win every merge of the
    /// item for a year, and its delete would keep the item out for as long.
    @Test func itemsMergeClampsItemTimesMoreThanFiveMinutesAhead() throws {
        let ahead: JSONObject = ["items": [item("a", "AHEAD", updated: 365 * 86_400)]]
        let merged = try #require(F.resolve(F.operation(.update, base: 2, data: ahead, at: -90), itemsEntity(), Self.itemsType).written)
        #expect(merged.data?["items"] == [item("a", "AHEAD", updated: 365 * 86_400), item("b", "bread", updated: -100)])
        #expect(merged.meta.itemTimes == ["a": F.now])
        // A minute ahead is within the skew: later than the clamped time, it wins.
        let minute: JSONObject = ["items": [item("a", "MINUTE", updated: 60)]]
        let next = try #require(F.resolve(F.operation(.update, base: 2, data: minute, at: -80), merged, Self.itemsType).written)
        #expect(next.data?["items"] == [item("a", "MINUTE", updated: 60), item("b", "bread", updated: -100)])
        #expect(next.meta.itemTimes == [:])
        // A current write's far-ahead item is clamped too; so is a far-ahead delete.
        let current = try #require(F.resolve(F.operation(.update, base: 3, data: ahead, at: -80), itemsEntity(), Self.itemsType).written)
        #expect(current.meta.itemTimes == ["a": F.now])
        let deleting: JSONObject = ["items": [item("b", "bread", updated: -100, deleted: 365 * 86_400)]]
        let deleted = try #require(F.resolve(F.operation(.update, base: 2, data: deleting, at: -70), itemsEntity(), Self.itemsType).written)
        #expect(deleted.meta.itemTombstones == ["b": F.now])
        let revived = try #require(F.resolve(F.operation(.update, base: 2, data: ["items": [item("b", "bread again", updated: 120)]], at: -60), deleted, Self.itemsType).written)
        #expect(revived.data?["items"] == [item("a", "apple", updated: -100), item("b", "bread again", updated: 120)])
    }

    @Test func itemsMergeDropsDeletedItemsOnCurrentWritesToo() throws {
        let incoming: JSONObject = ["mealType": "lunch", "items": [item("a", "apple", updated: -5), item("z", "zucchini", updated: -5, deleted: -1)]]
        let state = try #require(F.resolve(F.operation(.create, base: 0, data: incoming), nil, Self.itemsType).written)
        #expect(state.data?["items"] == [item("a", "apple", updated: -5)])
        #expect(state.meta.itemTombstones == ["z": F.at(-1)])
    }

    @Test(arguments: [
        (["items": "nope"] as JSONObject, "field 'items' must be an array"),
        (["items": [1]] as JSONObject, "field 'items[0]' must be an object"),
        (["items": [["name": "x"]]] as JSONObject, "field 'items[0].id' must be a string or an integer"),
        (["items": [["id": "a"], ["id": "a"]]] as JSONObject, "field 'items' holds the id 'a' twice"),
        (["items": [["id": "a", "updatedAt": "soon"]]] as JSONObject, "field 'items[0].updatedAt' must be an RFC 3339 timestamp"),
        (["items": [["id": "a", "deletedAt": 5]]] as JSONObject, "field 'items[0].deletedAt' must be an RFC 3339 timestamp"),
    ])
    func itemsMergeRejectsMalformedItems(_ data: JSONObject, _ message: String) {
        for (base, current) in [(Int64(0), nil as EntityState?), (3, itemsEntity()), (2, itemsEntity())] {
            let intent: SyncOperation.Intent = current == nil ? .create : .update
            let decision = F.resolve(F.operation(intent, base: base, data: data), current, Self.itemsType)
            #expect(decision == .reject(.validationError, message))
        }
    }

    /// `items: null` removes the array, current or stale alike: stale, it is a top-level field
    /// under lww (a later client removes it, an earlier one changes nothing), never a malformed array.
    @Test func itemsMergeNullItemsFollowLastWriteWins() {
        let current = F.resolve(F.operation(.update, base: 3, data: ["items": .null], at: -30), itemsEntity(), Self.itemsType)
        #expect(current.written?.data?["items"] == nil && current.status == .applied)
        let later = F.resolve(F.operation(.update, base: 2, data: ["items": .null], at: -30), itemsEntity(), Self.itemsType)
        #expect(later.status == .conflict(.merged))
        #expect(later.written?.data?["items"] == nil && later.written?.data?["mealType"] == "lunch")
        let earlier = F.resolve(F.operation(.update, base: 2, data: ["items": .null], at: -90), itemsEntity(), Self.itemsType)
        #expect(earlier.status == .conflict(.merged) && earlier.written == nil)
    }

    @Test func itemsMergeStaleDeleteWins() {
        #expect(F.resolve(F.operation(.delete, base: 1, at: -3600), itemsEntity(), Self.itemsType).written?.isDeleted == true)
    }

    @Test func itemsMergeHonoursCustomFieldNames() throws {
        let custom = EntityTypeConfig(name: "notes", policy: .itemsMerge, items: .init(path: "lines", idField: "key", updatedAtField: "at", deletedAtField: "gone"))
        let current = F.entity(data: ["lines": [["key": 1, "at": .string(F.at(-100).rfc3339)]]])
        let incoming: JSONObject = ["lines": [["key": 1, "gone": .string(F.at(-10).rfc3339)], ["key": 2, "at": .string(F.at(-10).rfc3339)]]]
        let state = try #require(F.resolve(F.operation(.update, base: 1, data: incoming), current, custom).written)
        #expect(state.data?["lines"] == [["key": 2, "at": .string(F.at(-10).rfc3339)]])
        #expect(state.meta.itemTombstones == ["1": F.at(-10)])
    }
}
