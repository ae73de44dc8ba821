@testable import SyncGatePostgres
import SyncGateCore
import SyncGateStorage
import Testing

/// The text of each NOTIFY and back: scope keys, user and device ids may hold ':' and any
/// Unicode, so numbers come first and the user id carries its length.
@Suite struct NotificationPayloadTests {
    static let events: [StoreEvent] = [
        .jobsAvailable,
        .resynchronize,
        .jobFinished(42, device: DeviceKey(userID: "alice", deviceID: "phone")),
        .jobFinished(7, device: DeviceKey(userID: "a:b:ü🙂", deviceID: ":9:x")),
        .jobFinished(8, device: DeviceKey(userID: "", deviceID: "")),
        .feedAdvanced(.household("home:1"), head: 19),
        .feedAdvanced(.user("🙂:x"), head: 0),
        .scopesChanged(userID: "user:with:colons", version: 3),
    ]

    @Test(arguments: events)
    func everyEventSurvivesTheRoundTrip(_ event: StoreEvent) {
        #expect(NotificationPayload.event(from: NotificationPayload.encode(event)) == event)
    }

    @Test(arguments: ["", "job:", "job:1", "job:1:9:ab", "job:x:1:a", "feed:x:user:a", "feed:1:nope", "user:", "what"])
    func malformedPayloadsAreIgnored(_ payload: String) {
        #expect(NotificationPayload.event(from: payload) == nil)
    }
}
