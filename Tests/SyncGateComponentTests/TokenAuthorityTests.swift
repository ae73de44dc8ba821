import Crypto
import Foundation
import SyncGateCore
import SyncGateWire
import SyncGateServer
import SyncGateStorage
import Testing

@testable import SyncGateHTTP

/// Bearer tokens: what is accepted, and every way a token is refused (401 with a message that
/// says why). Tokens are built by hand here so the header and claims can be anything.
@Suite struct TokenAuthorityTests {
    static let secret = "token-tests-secret-token-tests-secret-0123"
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    static func base64URL(_ data: some DataProtocol) -> String {
        Data(data).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// `header.payload.signature`, signed with HMAC-SHA256 under `secret` whatever `alg` says.
    static func token(header: String = #"{"alg":"HS256","typ":"JWT"}"#, claims: String, secret: String = secret, signature: String? = nil) -> String {
        let input = base64URL(Data(header.utf8)) + "." + base64URL(Data(claims.utf8))
        let mac = HMAC<SHA256>.authenticationCode(for: Data(input.utf8), using: SymmetricKey(data: Data(secret.utf8)))
        return input + "." + (signature ?? base64URL(Data(mac)))
    }

    func claims(exp: Double? = 3600, nbf: Double? = nil, sub: String = "alice") -> String {
        var fields = [#""sub":"\#(sub)""#]
        if let exp { fields.append(#""exp":\#(Int(now.timeIntervalSince1970 + exp))"#) }
        if let nbf { fields.append(#""nbf":\#(Int(now.timeIntervalSince1970 + nbf))"#) }
        return "{" + fields.joined(separator: ",") + "}"
    }

    func verify(_ token: String, maximumLifetime: Int = TokenAuthority.defaultMaximumLifetimeSeconds) async -> Result<String, ProtocolError> {
        let authority = await TokenAuthority(secret: Self.secret, maximumLifetimeSeconds: maximumLifetime)
        do {
            return .success(try await authority.verify(token, now: now).userID)
        } catch {
            return .failure(error)
        }
    }

    func refusal(_ token: String, maximumLifetime: Int = TokenAuthority.defaultMaximumLifetimeSeconds) async -> String? {
        guard case .failure(let error) = await verify(token, maximumLifetime: maximumLifetime) else { return nil }
        #expect(error.code == .unauthenticated)
        return error.message
    }

    @Test func aWellFormedTokenIsAccepted() async throws {
        #expect(try await verify(Self.token(claims: claims())).get() == "alice")
        // What `syncgate token` issues verifies too.
        let issued = try await TokenAuthority(secret: Self.secret).issue(userID: "bob", ttlSeconds: 600)
        #expect(try await TokenAuthority(secret: Self.secret).verify(issued).userID == "bob")
    }

    @Test func expiryIsRequiredAndBounded() async {
        #expect(await refusal(Self.token(claims: claims(exp: nil))) == "token has no expiry (exp)")
        #expect(await refusal(Self.token(claims: claims(exp: -1))) == "token expired")
        #expect(await refusal(Self.token(claims: claims(exp: 7200)), maximumLifetime: 3600)?.contains("lives longer than the allowed 3600 s") == true)
        #expect(await refusal(Self.token(claims: claims(exp: 3600)), maximumLifetime: 3600) == nil)
    }

    @Test func aSubjectWithAControlCharacterIsRefused() async {
        // JSON escapes: a NUL, a tab and DEL in `sub`; every request of such a user would be a 500.
        for sub in [#"al\u0000ice"#, #"al\tice"#, #"al\u007fice"#] {
            #expect(await refusal(Self.token(claims: claims(sub: sub)))?.contains("without control characters") == true, "\(sub)")
        }
        #expect(await refusal(Self.token(claims: claims(sub: "jos\u{E9}"))) == nil)
    }

    @Test func notBeforeIsHonouredWithAMinuteOfClockSkew() async {
        #expect(await refusal(Self.token(claims: claims(nbf: 600))) == "token is not valid yet (nbf)")
        #expect(await refusal(Self.token(claims: claims(nbf: 30))) == nil)
        #expect(await refusal(Self.token(claims: claims(nbf: -600))) == nil)
    }

    @Test func unsignedAndOtherAlgorithmsAreRefused() async {
        let claims = claims()
        // alg none, with and without a signature part.
        let none = Self.base64URL(Data(#"{"alg":"none","typ":"JWT"}"#.utf8)) + "." + Self.base64URL(Data(claims.utf8))
        #expect(await refusal(none + ".") != nil)
        #expect(await refusal(none) != nil)
        // Algorithm confusion: a header naming another algorithm, MAC'd with the shared secret.
        for alg in ["RS256", "ES256", "EdDSA", "HS384", "HS512", "hs256", ""] {
            #expect(await refusal(Self.token(header: #"{"alg":"\#(alg)","typ":"JWT"}"#, claims: claims)) != nil, "\(alg)")
        }
    }

    @Test func aTokenChangedAfterSigningIsRefused() async throws {
        let valid = Self.token(claims: claims())
        let parts = valid.split(separator: ".").map(String.init)
        let header = Self.base64URL(Data(#"{"alg":"HS256","typ":"JWT","kid":"other"}"#.utf8))
        let payload = Self.base64URL(Data(claims(sub: "mallory").utf8))
        #expect(await refusal([header, parts[1], parts[2]].joined(separator: ".")) == "token signature is invalid")
        #expect(await refusal([parts[0], payload, parts[2]].joined(separator: ".")) == "token signature is invalid")
        #expect(await refusal(Self.token(claims: claims(), secret: Self.secret + "x")) == "token signature is invalid")
        #expect(await refusal([parts[0], parts[1], String(parts[2].dropLast(2))].joined(separator: ".")) != nil)
    }

    @Test func shortAndExampleSecretsAreRefusedAtStart() throws {
        let database = try DatabaseURL(parsing: "postgres://syncgate@localhost/x")
        #expect(throws: ConfigurationError.self) { try SigningSecret.resolve(configured: String(repeating: "x", count: 31), database: database) }
        #expect(throws: Never.self) { try SigningSecret.resolve(configured: String(repeating: "x", count: 32), database: database) }
        for placeholder in SigningSecret.placeholders {
            #expect(throws: ConfigurationError.self) { try SigningSecret.resolve(configured: placeholder, database: database) }
        }
    }

    /// Every literal signing secret in `deploy/` is one the server refuses.
    @Test func everyExampleSecretShippedInDeployIsRefused() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let folder = root.appendingPathComponent("deploy")
        var found: [String] = []
        for case let url as URL in FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil)! where ["yml", "yaml"].contains(url.pathExtension) {
            for line in try String(contentsOf: url, encoding: .utf8).split(separator: "\n") {
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                for key in ["SYNCGATE_JWT_SECRET:", "jwt-secret:"] where trimmed.hasPrefix(key) {
                    let value = trimmed.dropFirst(key.count).trimmingCharacters(in: .whitespaces.union(["\"", "'"]))
                    // References to a Secret or to the environment are not literals.
                    if value.isEmpty || value.hasPrefix("${") || value.hasPrefix("{") { continue }
                    found.append(value)
                }
            }
        }
        #expect(!found.isEmpty, "the scan found no example secret in deploy/: has the format changed?")
        for value in found {
            #expect(SigningSecret.placeholders.contains(value), "\(value) ships in deploy/ but the server would accept it")
        }
    }

    /// A verified signature is trusted for a minute, but every request checks the claims again:
    /// a token that expires is refused at once, even if its signature was verified moments ago.
    @Test func aVerifiedTokenIsCheckedAgainAtEveryRequest() async throws {
        let authority = await TokenAuthority(secret: Self.secret)
        let token = Self.token(claims: claims(exp: 30))
        #expect(try await authority.verify(token, now: now).userID == "alice")
        #expect(authority.verified.count == 1)
        #expect(try await authority.verify(token, now: now.addingTimeInterval(10)).userID == "alice")
        do {
            _ = try await authority.verify(token, now: now.addingTimeInterval(31))
            Issue.record("an expired token was accepted from the cache")
        } catch {
            #expect(error.message == "token expired")
        }
        // A forged signature is never cached, and never taken for the genuine one.
        let forged = Self.token(claims: claims(exp: 30), signature: "AAAA")
        do {
            _ = try await authority.verify(forged, now: now)
            Issue.record("a forged token was accepted")
        } catch {
            #expect(error.code == .unauthenticated)
        }
        #expect(authority.verified.count == 1)
    }

    @Test func verifiedSignaturesAreForgottenAfterTheirLifetimeOrWhenFull() {
        let cache = VerifiedTokens()
        let claims = VerifiedTokens.Claims(subject: "alice", expiry: now.addingTimeInterval(3600), notBefore: nil)
        cache.insert("t", claims: claims, now: now)
        #expect(cache.claims(of: "t", now: now.addingTimeInterval(VerifiedTokens.lifetime - 1))?.subject == "alice")
        #expect(cache.claims(of: "t", now: now.addingTimeInterval(VerifiedTokens.lifetime)) == nil)
        #expect(cache.count == 0)
        // A clock that went back does not revive an entry from the future.
        cache.insert("t", claims: claims, now: now)
        #expect(cache.claims(of: "t", now: now.addingTimeInterval(-1)) == nil)
        for index in 0..<VerifiedTokens.capacity {
            cache.insert("t\(index)", claims: claims, now: now.addingTimeInterval(Double(index) / 1000))
        }
        cache.insert("newest", claims: claims, now: now.addingTimeInterval(40))
        #expect(cache.count <= VerifiedTokens.capacity / 2 + 1)
        #expect(cache.claims(of: "newest", now: now.addingTimeInterval(41)) != nil)
        #expect(cache.claims(of: "t0", now: now.addingTimeInterval(41)) == nil)
    }
}
