/// A device's push address, `PUT /v1/devices/current/push` (docs/push.md): where the server
/// sends the silent `sync_nudge` that wakes the app in the background when a feed it reads
/// advances. One per device; a new one replaces the old.
public struct PushRegistration: Sendable, Hashable {
    public enum Provider: String, Sendable, Hashable, CaseIterable {
        case apns
        case fcm
    }

    /// APNs keeps development builds' devices (`sandbox`) apart from App Store and TestFlight
    /// builds' (`production`); a token is valid in one of them only.
    public enum Environment: String, Sendable, Hashable, CaseIterable {
        case sandbox
        case production
    }

    public var provider: Provider
    /// The APNs device token in hex (lowercased), or the FCM registration token.
    public var token: String
    /// APNs: the app's bundle id (`apns-topic`).
    public var topic: String?
    /// APNs only.
    public var environment: Environment?

    public static func apns(token: String, topic: String, environment: Environment) -> PushRegistration {
        PushRegistration(provider: .apns, token: token.lowercased(), topic: topic, environment: environment)
    }

    public static func fcm(token: String) -> PushRegistration {
        PushRegistration(provider: .fcm, token: token, topic: nil, environment: nil)
    }

    private init(provider: Provider, token: String, topic: String?, environment: Environment?) {
        self.provider = provider
        self.token = token
        self.topic = topic
        self.environment = environment
    }

    /// Reads a registration body; every field is checked, and unknown fields are refused (a
    /// misspelt `environment` would otherwise send to the wrong APNs host).
    public init(json: JSONValue) throws(WireFormatError) {
        guard let object = json.objectValue else { throw WireFormatError("the body must be a JSON object") }
        guard let name = object["provider"]?.stringValue else { throw WireFormatError("'provider' must be \"apns\" or \"fcm\"") }
        guard let provider = Provider(rawValue: name) else { throw WireFormatError("'provider' must be \"apns\" or \"fcm\", not \"\(name)\"") }
        guard let token = object["token"]?.stringValue else { throw WireFormatError("'token' must be a string") }
        switch provider {
        case .apns:
            if let unknown = object.keys.sorted().first(where: { !["provider", "token", "topic", "environment"].contains($0) }) {
                throw WireFormatError("unknown field '\(unknown)'")
            }
            guard Self.isAPNsToken(token) else { throw WireFormatError("'token' must be the APNs device token in hex: 64 to 200 hex digits") }
            guard let topic = object["topic"]?.stringValue, Self.isBundleID(topic) else {
                throw WireFormatError("'topic' must be the app's bundle id: 1 to 255 characters of A-Z a-z 0-9 . -")
            }
            guard let environment = object["environment"]?.stringValue.flatMap(Environment.init(rawValue:)) else {
                throw WireFormatError("'environment' must be \"sandbox\" (development builds) or \"production\" (TestFlight and App Store)")
            }
            self = .apns(token: token, topic: topic, environment: environment)
        case .fcm:
            if let unknown = object.keys.sorted().first(where: { !["provider", "token"].contains($0) }) {
                throw WireFormatError("unknown field '\(unknown)'")
            }
            guard Self.isFCMToken(token) else { throw WireFormatError("'token' must be the FCM registration token: 1 to 4096 visible ASCII characters") }
            self = .fcm(token: token)
        }
    }

    public var json: JSONValue {
        var object: JSONObject = ["provider": .string(provider.rawValue), "token": .string(token)]
        if let topic { object["topic"] = .string(topic) }
        if let environment { object["environment"] = .string(environment.rawValue) }
        return .object(object)
    }

    static func isAPNsToken(_ token: String) -> Bool {
        (64...200).contains(token.utf8.count) && token.utf8.count % 2 == 0 && token.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"), UInt8(ascii: "A")...UInt8(ascii: "F"): true
            default: false
            }
        }
    }

    static func isBundleID(_ topic: String) -> Bool {
        (1...255).contains(topic.utf8.count) && topic.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "."), UInt8(ascii: "-"): true
            default: false
            }
        }
    }

    /// FCM does not document its tokens' alphabet (they are base64url and `:` today): anything
    /// printable without spaces, as it travels in a JSON body only.
    static func isFCMToken(_ token: String) -> Bool {
        (1...4096).contains(token.utf8.count) && token.utf8.allSatisfy { (0x21...0x7E).contains($0) }
    }
}
