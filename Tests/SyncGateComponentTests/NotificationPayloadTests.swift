@testable import SyncGatePostgres
import SyncGateCore
import SyncGateWire
import SyncGateStorage
import Testing

/// The text of each NOTIFY and back: scope keys, user and device ids may hold ':' and any
/// Unicode, so numbers come first and the user id carries its length.
@Suite struct NotificationPayloadTests {
    static let events: [StoreEvent] = [
        .jobsAvailable,
        .resynchronize,
        .jobFinishedWithoutResults(42, device: DeviceKey(userID: "alice", deviceID: "phone")),
        .jobFinishedWithoutResults(7, device: DeviceKey(userID: "a:b:ü🙂", deviceID: ":9:x")),
        .jobFinishedWithoutResults(8, device: DeviceKey(userID: "", deviceID: "")),
        .jobFinished(FinishedJob(id: 9, userID: "a user with spaces", deviceID: "phone", state: .done, results: #"[{"status":"applied"}]"#)),
        .jobFinished(FinishedJob(id: 10, userID: "x", deviceID: "d-1.2:3", state: .dead, results: "[]")),
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

    /// Results too large for a NOTIFY go without them: the front reads the job back.
    @Test func resultsPastThePayloadLimitAreLeftOut() {
        let device = DeviceKey(userID: "alice", deviceID: "phone")
        let large = FinishedJob(
            id: 11, userID: device.userID, deviceID: device.deviceID, state: .done,
            results: "[" + String(repeating: "x", count: NotificationPayload.maximumBytes) + "]"
        )
        let payload = NotificationPayload.encode(.jobFinished(large))
        #expect(payload.utf8.count < 8000)
        #expect(NotificationPayload.event(from: payload) == .jobFinishedWithoutResults(11, device: device))
    }

    /// A release that predates results in the payload reads the job id and the user as before
    /// (and a device id that matches no device, so its long-polls take the watermark from a read).
    @Test func anOlderReleaseStillReadsTheJobAndTheUser() {
        let payload = NotificationPayload.encode(
            .jobFinished(FinishedJob(id: 12, userID: "al ice", deviceID: "phone", state: .done, results: "[]"))
        )
        // The parser of the release before (job:<id>:<user length>:<user><device>).
        let rest = payload.dropFirst("job:".count)
        let id = rest.prefix { $0 != ":" }
        let afterID = rest.dropFirst(id.count + 1)
        let length = Int(afterID.prefix { $0 != ":" })!
        let ids = afterID.dropFirst(String(length).count + 1)
        #expect(id == "12" && String(ids.utf8.prefix(length))! == "al ice")
    }

    @Test(arguments: ["job:1:1:ab", "job:1:1:ab done", "job:1:1:ab finished []", "job:1:1:ab  []"])
    func malformedOutcomesAreIgnoredOrReadWithout(_ payload: String) {
        switch NotificationPayload.event(from: payload) {
        case .jobFinishedWithoutResults(1, let device)?: #expect(device == DeviceKey(userID: "a", deviceID: "b"))
        case nil: break
        default: Issue.record("\(payload) read as something else")
        }
    }
}
