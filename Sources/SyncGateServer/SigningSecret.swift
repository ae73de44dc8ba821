import Foundation
package import SyncGateCore
import SyncGateWire
package import SyncGateStorage

/// The HS256 signing secret and where it came from.
package struct SigningSecret: Sendable {
    package var value: String
    /// Set when it is the generated development secret: the file that keeps it.
    package var developmentFile: String?

    /// A configured secret must have at least this many bytes (HS256 keys shorter than the hash
    /// are guessable offline from one token).
    package static let minimumBytes = 32
    /// The example values in `deploy/` (a test keeps this list complete): refused, so a copied
    /// manifest cannot go live with a secret everyone knows.
    package static let placeholders: Set<String> = ["change-me-to-a-long-random-secret"]

    /// The configured secret (checked: long enough, not a placeholder); without one, in embedded
    /// (SQLite) mode, a development secret generated once and kept beside the database, so `serve`
    /// and `token` agree across restarts.
    package static func resolve(configured: String?, database: DatabaseURL) throws(ConfigurationError) -> SigningSecret {
        if let configured {
            guard !placeholders.contains(configured) else {
                throw ConfigurationError("SYNCGATE_JWT_SECRET is the example value from deploy/: set a long random secret (e.g. `openssl rand -hex 32`)")
            }
            guard configured.utf8.count >= minimumBytes else {
                throw ConfigurationError(
                    "SYNCGATE_JWT_SECRET has \(configured.utf8.count) bytes; it needs at least \(minimumBytes) (e.g. `openssl rand -hex 32`)"
                )
            }
            return SigningSecret(value: configured)
        }
        guard case .sqlite(let path) = database else {
            throw ConfigurationError("SYNCGATE_JWT_SECRET is not set: export a long random secret (e.g. `openssl rand -hex 32`)")
        }
        let file = (URL(fileURLWithPath: path).deletingLastPathComponent().path as NSString).appendingPathComponent("jwt-secret")
        if let stored = try? String(contentsOfFile: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines), !stored.isEmpty {
            return SigningSecret(value: stored, developmentFile: file)
        }
        try OpenStore.ensureFolder(of: file)
        var generator = SystemRandomNumberGenerator()
        let secret = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: .min ... .max, using: &generator)) }.joined()
        guard FileManager.default.createFile(atPath: file, contents: Data((secret + "\n").utf8), attributes: [.posixPermissions: 0o600]) else {
            throw ConfigurationError("cannot write the development secret to \(file)")
        }
        return SigningSecret(value: secret, developmentFile: file)
    }
}
