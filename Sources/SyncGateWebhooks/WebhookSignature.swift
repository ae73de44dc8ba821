package import Crypto
import Foundation

/// Standard Webhooks signing (standardwebhooks.com): `webhook-signature: v1,<base64 HMAC-SHA256>`
/// of `<webhook-id>.<webhook-timestamp>.<body>`, keyed by the bytes of a `whsec_<base64>` secret.
/// Written here because no mirrored package implements it; HMAC itself is swift-crypto's.
package enum WebhookSignature {
    package static let secretPrefix = "whsec_"

    /// A new secret: `whsec_` and the base64 of 32 random bytes.
    package static func newSecret() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return secretPrefix + Data(bytes).base64EncodedString()
    }

    /// The key of a secret, or `nil` when it is not `whsec_` and base64 of 24 to 64 bytes.
    package static func key(of secret: String) -> SymmetricKey? {
        guard secret.hasPrefix(secretPrefix), let bytes = Data(base64Encoded: String(secret.dropFirst(secretPrefix.count))),
            (24...64).contains(bytes.count)
        else { return nil }
        return SymmetricKey(data: bytes)
    }

    /// The `webhook-signature` value for one message.
    package static func sign(id: String, timestamp: Int64, body: [UInt8], key: SymmetricKey) -> String {
        var message = Array("\(id).\(timestamp).".utf8)
        message += body
        let mac = HMAC<SHA256>.authenticationCode(for: message, using: key)
        return "v1," + Data(mac).base64EncodedString()
    }

    /// Whether any `v1` signature of a space-separated `webhook-signature` header matches (a
    /// receiver's check, as the docs show it; the tests' receivers use it).
    package static func verify(id: String, timestamp: Int64, body: [UInt8], header: String, key: SymmetricKey) -> Bool {
        let expected = sign(id: id, timestamp: timestamp, body: body, key: key)
        return header.split(separator: " ").contains { candidate in
            // Constant time: compare every byte whatever the first difference.
            let a = Array(candidate.utf8)
            let b = Array(expected.utf8)
            guard a.count == b.count else { return false }
            return zip(a, b).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
        }
    }
}
