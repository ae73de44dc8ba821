import Foundation
import JWTKit

/// Bearer tokens for the demo's users: given on the command line, or signed here with the
/// server's development secret (the `jwt-secret` file `syncgate serve` keeps beside its database).
struct DemoTokens: Sendable {
    private let keys: JWTKeyCollection?
    private let given: [String: String]

    init(secretFile: String?, given: [String: String]) async throws {
        self.given = given
        guard let secretFile else {
            keys = nil
            return
        }
        guard let secret = try? String(contentsOfFile: secretFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines), !secret.isEmpty else {
            throw DemoError("cannot read the signing secret from \(secretFile): start `syncgate serve` first, or pass --alice-token and --bob-token")
        }
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        self.keys = keys
    }

    struct Claims: JWTPayload {
        var sub: SubjectClaim
        var exp: ExpirationClaim

        func verify(using algorithm: some JWTAlgorithm) async throws {
            try exp.verifyNotExpired()
        }
    }

    /// A token for `user`, valid for an hour.
    func token(for user: String) async throws -> String {
        if let token = given[user] { return token }
        guard let keys else { throw DemoError("no token for \(user)") }
        return try await keys.sign(Claims(sub: SubjectClaim(value: user), exp: ExpirationClaim(value: Date().addingTimeInterval(3600))))
    }
}

struct DemoError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
