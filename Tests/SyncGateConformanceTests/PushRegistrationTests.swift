import HTTPTypes
import SyncGateCore
import SyncGateStorage
import SyncGateTestSupport
import SyncGateWire
import Testing

/// `PUT|GET|DELETE /v1/devices/current/push`: a device's push address, stored per (user,
/// device), replaced on re-registration, refused with a clear error when malformed.
@Suite(.timeLimit(.minutes(10))) struct PushRegistrationTests {
    static let path = "/v1/devices/current/push"
    static let apnsToken = String(repeating: "a1", count: 32)

    static func apns(token: String = apnsToken, environment: String = "production") -> String {
        JSONValue.object(["provider": "apns", "token": .string(token), "topic": "com.example.timetracker", "environment": .string(environment)]).serialized()
    }

    @Test(arguments: Driver.selected)
    func aDeviceRegistersReplacesAndRemovesItsAddress(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 0) { http in
            let phone = try await http.headers("alice", device: "phone")
            #expect(try await http.send(.get, Self.path, headers: phone).status == 404)

            let registered = try await http.send(.put, Self.path, headers: phone, body: Self.apns(token: Self.apnsToken.uppercased()))
            #expect(registered.status == 200)
            // Hex tokens are stored lowercased: APNs treats them alike, and one device has one row.
            #expect(registered.json?["token"] == .string(Self.apnsToken))
            #expect(registered.json?["environment"] == "production" && registered.json?["topic"] == "com.example.timetracker")
            #expect(registered.json?["registered_at"]?.stringValue.flatMap(Timestamp.init(rfc3339:)) != nil)
            #expect(try await http.send(.get, Self.path, headers: phone).json == registered.json)

            // Another device of the same user, and the same device id of another user, are apart.
            let tablet = try await http.headers("alice", device: "tablet")
            let bobsPhone = try await http.headers("bob", device: "phone")
            #expect(try await http.send(.put, Self.path, headers: tablet, body: #"{"provider":"fcm","token":"fcm:APA91b-tablet"}"#).status == 200)
            #expect(try await http.send(.get, Self.path, headers: bobsPhone).status == 404)

            // Registering again replaces the address (the OS handed the app a new token).
            let replaced = try await http.send(.put, Self.path, headers: phone, body: #"{"provider":"fcm","token":"fcm:APA91b-phone"}"#)
            #expect(replaced.json?["provider"] == "fcm" && replaced.json?["token"] == "fcm:APA91b-phone" && replaced.json?["topic"] == nil)
            let stored = try await http.store.store.pushRegistration(DeviceKey(userID: "alice", deviceID: "phone"))
            #expect(stored?.registration == .fcm(token: "fcm:APA91b-phone"))
            #expect(try await http.store.queryTexts("SELECT device_id FROM push_registrations ORDER BY device_id") == ["phone", "tablet"])

            // The same token registered by another user (the phone signed in as someone else):
            // it is theirs now, and the earlier user's nudges no longer reach the phone.
            let bobsOtherPhone = try await http.headers("bob", device: "phone-2")
            #expect(try await http.send(.put, Self.path, headers: bobsOtherPhone, body: #"{"provider":"fcm","token":"fcm:APA91b-tablet"}"#).status == 200)
            #expect(try await http.send(.get, Self.path, headers: tablet).status == 404)
            #expect(try await http.send(.get, Self.path, headers: bobsOtherPhone).json?["token"] == "fcm:APA91b-tablet")

            #expect(try await http.send(.delete, Self.path, headers: phone).status == 204)
            #expect(try await http.send(.delete, Self.path, headers: phone).status == 204)
            #expect(try await http.send(.get, Self.path, headers: phone).status == 404)
            #expect(try await http.send(.get, Self.path, headers: bobsOtherPhone).status == 200)
        }
    }

    @Test(arguments: Driver.selected)
    func malformedRegistrationsAreRefusedAndChangeNothing(_ driver: Driver) async throws {
        try await HTTPHarness.with(driver, workers: 0) { http in
            let phone = try await http.headers("alice", device: "phone")
            #expect(try await http.send(.put, Self.path, headers: phone, body: Self.apns()).status == 200)
            let before = try await http.send(.get, Self.path, headers: phone).json
            let refused: [(String, String)] = [
                ("[]", "the body must be a JSON object"),
                ("{", "the body must be a JSON object"),
                (#"{"token":"x"}"#, #"'provider' must be "apns" or "fcm""#),
                (#"{"provider":"webpush","token":"x"}"#, #"'provider' must be "apns" or "fcm", not "webpush""#),
                (#"{"provider":"fcm"}"#, "'token' must be a string"),
                (#"{"provider":"fcm","token":""}"#, "'token' must be the FCM registration token: 1 to 4096 visible ASCII characters"),
                (#"{"provider":"fcm","token":"has space"}"#, "'token' must be the FCM registration token: 1 to 4096 visible ASCII characters"),
                (#"{"provider":"fcm","token":"t","topic":"com.x"}"#, "unknown field 'topic'"),
                (Self.apns(token: "xyz"), "'token' must be the APNs device token in hex: 64 to 200 hex digits"),
                (Self.apns(token: String(repeating: "a", count: 63)), "'token' must be the APNs device token in hex: 64 to 200 hex digits"),
                (Self.apns(environment: "development"), #"'environment' must be "sandbox" (development builds) or "production" (TestFlight and App Store)"#),
                (#"{"provider":"apns","token":"\#(Self.apnsToken)","environment":"sandbox"}"#, "'topic' must be the app's bundle id: 1 to 255 characters of A-Z a-z 0-9 . -"),
                (#"{"provider":"apns","token":"\#(Self.apnsToken)","topic":"com.x/y","environment":"sandbox"}"#, "'topic' must be the app's bundle id: 1 to 255 characters of A-Z a-z 0-9 . -"),
                (#"{"provider":"apns","token":"\#(Self.apnsToken)","topic":"com.x","environment":"sandbox","enviroment":"x"}"#, "unknown field 'enviroment'"),
            ]
            for (body, message) in refused {
                let answer = try await http.send(.put, Self.path, headers: phone, body: body)
                #expect(answer.status == 400, "\(body)")
                #expect(answer.json?["error"]?["code"] == "VALIDATION_ERROR" && answer.json?["error"]?["message"] == .string(message), "\(body): \(String(describing: answer.json))")
            }
            #expect(try await http.send(.get, Self.path, headers: phone).json == before)
            // The device is named as for push and pull; a query parameter is refused.
            #expect(try await http.send(.put, Self.path, headers: try await http.headers("alice", device: nil), body: Self.apns()).status == 400)
            #expect(try await http.send(.put, Self.path + "?x=1", headers: phone, body: Self.apns()).status == 400)
            #expect(try await http.send(.delete, Self.path, headers: [.contentType: "application/json"]).status == 401)
        }
    }
}
