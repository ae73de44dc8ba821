import SyncGateWire

/// How a provider answered one nudge, as the nudger acts on it. Decided from the status and the
/// provider's error body alone (no I/O), so that every answer Apple and Google document is tested.
package enum PushOutcome: Sendable, Hashable {
    case sent
    /// The address is gone for good (the app was removed, the token belongs to another app or
    /// environment): remove the registration.
    case unregistered(reason: String)
    /// Try again later: throttled, the provider is failing, or the request did not complete.
    /// `after`: what the provider asked for (`Retry-After`), in seconds.
    case retry(reason: String, after: Int64?)
    /// The provider as a whole is failing and said when to come back (a `5xx` with
    /// `Retry-After`): this nudge is tried again then, and none of the provider's nudges is sent
    /// before (seconds).
    case providerBusy(reason: String, after: Int64)
    /// The provider token was refused as expired: sign a new one and send again, once.
    case renewCredentials(reason: String)
    /// This nudge, or every nudge with these credentials, cannot succeed as it is (a wrong key,
    /// topic or project): it is dropped and logged; retrying would only repeat the refusal.
    case rejected(reason: String)

    /// The metrics label.
    package var label: String {
        switch self {
        case .sent: "sent"
        case .unregistered: "unregistered"
        case .retry, .providerBusy: "retry"
        case .renewCredentials: "renew_credentials"
        case .rejected: "rejected"
        }
    }

    /// APNs: https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns
    package static func apns(status: Int, body: [UInt8], retryAfter: String?) -> PushOutcome {
        let reason = (try? JSONParser().parse(body))?.objectValue?["reason"]?.stringValue ?? "HTTP \(status)"
        let asked = retryAfter.flatMap(Self.seconds)
        switch (status, reason) {
        case (200, _): return .sent
        case (410, _), (400, "BadDeviceToken"), (400, "DeviceTokenNotForTopic"): return .unregistered(reason: reason)
        case (403, "ExpiredProviderToken"): return .renewCredentials(reason: reason)
        // APNs' 429 is about one device token; a 5xx is the service's own state.
        case (500...599, _): return asked.map { .providerBusy(reason: reason, after: $0) } ?? .retry(reason: reason, after: nil)
        case (429, _): return .retry(reason: reason, after: asked)
        default: return .rejected(reason: "\(status) \(reason)")
        }
    }

    /// FCM HTTP v1: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
    package static func fcm(status: Int, body: [UInt8], retryAfter: String?) -> PushOutcome {
        let error = (try? JSONParser().parse(body))?.objectValue?["error"]?.objectValue
        // The FCM code is in a detail of type FcmError; `status` is the generic gRPC code.
        let code = error?["details"]?.arrayValue?.lazy.compactMap { $0.objectValue?["errorCode"]?.stringValue }.first
            ?? error?["status"]?.stringValue ?? "HTTP \(status)"
        let asked = retryAfter.flatMap(Self.seconds)
        switch (status, code) {
        case (200, _): return .sent
        case (_, "UNREGISTERED"), (_, "SENDER_ID_MISMATCH"): return .unregistered(reason: code)
        // A registration token FCM cannot read is INVALID_ARGUMENT with a BadRequest detail
        // naming `message.token`; it never becomes valid, so the registration goes.
        case (400, "INVALID_ARGUMENT") where Self.violatedFields(error).contains("message.token"):
            return .unregistered(reason: "INVALID_ARGUMENT message.token")
        case (401, _): return .renewCredentials(reason: code)
        // FCM's 429 may be one device's quota; a 5xx is the service's own state.
        case (500...599, _): return asked.map { .providerBusy(reason: code, after: $0) } ?? .retry(reason: code, after: nil)
        case (429, _): return .retry(reason: code, after: asked)
        default: return .rejected(reason: "\(status) \(code)")
        }
    }

    /// The fields a `google.rpc.BadRequest` detail of an FCM error names.
    static func violatedFields(_ error: JSONObject?) -> [String] {
        (error?["details"]?.arrayValue ?? []).flatMap { detail -> [String] in
            guard detail.objectValue?["@type"]?.stringValue == "type.googleapis.com/google.rpc.BadRequest" else { return [] }
            return (detail.objectValue?["fieldViolations"]?.arrayValue ?? []).compactMap { $0.objectValue?["field"]?.stringValue }
        }
    }

    /// `Retry-After` in seconds (the HTTP-date form is not used by either provider).
    static func seconds(_ header: String) -> Int64? {
        let parts = header.split(separator: " ")
        guard parts.count == 1, let value = Int64(parts[0]), value >= 0 else { return nil }
        return value
    }
}
