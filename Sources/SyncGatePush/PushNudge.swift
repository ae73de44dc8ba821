package import SyncGateWire

/// Where a device hears its nudges: an APNs device token or an FCM registration token.
package enum PushAddress: Sendable, Hashable {
    /// `token`: the device token's hex; `topic`: the app's bundle id.
    case apns(token: String, topic: String, environment: APNsEnvironment)
    case fcm(token: String)

    package var provider: PushProvider {
        switch self {
        case .apns: .apns
        case .fcm: .fcm
        }
    }
}

package typealias PushProvider = PushRegistration.Provider

/// APNs keeps devices of development builds and of App Store builds on different hosts.
package typealias APNsEnvironment = PushRegistration.Environment

extension PushRegistration.Environment {
    package var host: String {
        switch self {
        case .sandbox: "api.sandbox.push.apple.com"
        case .production: "api.push.apple.com"
        }
    }
}

/// A silent push that makes an app run one sync (seed 004's `sync_nudge` handler), with the feeds
/// that advanced: `user` for the device's user, `household:<id>` for a household.
package struct PushNudge: Sendable, Hashable {
    package var address: PushAddress
    package var scopes: [String]

    /// APNs refuses a background push's payload over 4 KB; scopes past this many bytes are left
    /// out, and a nudge without `scopes` means "sync everything".
    static let scopesBudget = 3072

    /// Scopes as the payload carries them: all of them, or none when they would not fit.
    var carriedScopes: [String]? {
        var bytes = 0
        for scope in scopes {
            bytes += scope.utf8.count + 3
            if bytes > Self.scopesBudget { return nil }
        }
        return scopes
    }

    /// The APNs payload: `content-available` wakes the app without showing anything.
    package func apnsPayload() -> [UInt8] {
        var body: JSONObject = ["aps": ["content-available": 1], "type": "sync_nudge"]
        if let scopes = carriedScopes { body["scopes"] = .array(scopes.map(JSONValue.string)) }
        return JSONValue.object(body).serializedBytes()
    }

    /// The FCM `data` map: FCM carries only string values, so `scopes` is a JSON array in text.
    package func fcmData() -> JSONObject {
        var data: JSONObject = ["type": "sync_nudge"]
        if let scopes = carriedScopes { data["scopes"] = .string(JSONValue.array(scopes.map(JSONValue.string)).serialized()) }
        return data
    }
}
