import _CryptoExtras
import Hummingbird
import JWTKit
import NIOCore
import Synchronization
package import SyncGateHTTP
package import Foundation

/// An app's identity provider for tests: signing keys of its own (RS256, ES256, EdDSA), their public
/// halves served as a JWKS on 127.0.0.1 (with a `Cache-Control` the test may change), and a switch that
/// takes the endpoint down (503).
package final class TestIdentityProvider: Sendable {
    package static let issuer = "https://idp.test/"
    package static let audience = "syncgate-tests"

    /// One signing key: its id, and the JWK the provider publishes for it.
    package struct Key: Sendable {
        package let id: String
        let collection: JWTKeyCollection
        let jwk: [String: String]

        package static func rs256(_ id: String) async throws -> Key {
            let key = try Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048))
            let (modulus, exponent) = try key.publicKey.getKeyPrimitives()
            let collection = await JWTKeyCollection().add(rsa: key, digestAlgorithm: .sha256, kid: JWKIdentifier(string: id))
            return Key(id: id, collection: collection, jwk: [
                "kty": "RSA", "alg": "RS256", "use": "sig", "kid": id, "n": modulus.base64URL, "e": exponent.base64URL,
            ])
        }

        package static func eddsa(_ id: String) async throws -> Key {
            let key = try EdDSA.PrivateKey(curve: .ed25519)
            let collection = await JWTKeyCollection().add(eddsa: key, kid: JWKIdentifier(string: id))
            return Key(id: id, collection: collection, jwk: [
                "kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "kid": id, "x": key.publicKey.rawRepresentation.base64URL,
            ])
        }

        package static func es256(_ id: String) async throws -> Key {
            let key = ES256PrivateKey()
            guard let parameters = key.publicKey.parameters else { throw TestEnvironmentError(description: "no EC parameters") }
            let collection = await JWTKeyCollection().add(ecdsa: key, kid: JWKIdentifier(string: id))
            return Key(id: id, collection: collection, jwk: [
                "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": id, "x": parameters.x, "y": parameters.y,
            ])
        }
    }

    struct Claims: JWTPayload {
        var sub: String?
        var uid: String?
        var exp: ExpirationClaim?
        var nbf: NotBeforeClaim?
        var iss: String?
        var aud: AudienceClaim?
        var azp: String?
        var scope: String?
        var scp: [String]?
        var roles: [String]?

        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    struct State {
        var published: [Key] = []
        var down = false
        var cacheControl = "max-age=300"
        var fetches = 0
    }

    private let state = Mutex(State())
    package let url: String

    private init(url: String) {
        self.url = url
    }

    /// The keys the JWKS lists now (rotation: publish a new set).
    package func publish(_ keys: [Key]) { state.withLock { $0.published = keys } }
    package func setDown(_ down: Bool) { state.withLock { $0.down = down } }
    package func setCacheControl(_ value: String) { state.withLock { $0.cacheControl = value } }
    /// Requests the JWKS endpoint answered (or refused) so far.
    package var fetches: Int { state.withLock { $0.fetches } }

    /// The provider configuration a server uses to trust this provider.
    package func configuration(userClaim: String = "sub", serviceAudience: String? = nil, serviceClients: Set<String> = []) -> IdentityProviderKeys.Configuration {
        .init(jwksURLs: [url], issuer: Self.issuer, audience: Self.audience, userClaim: userClaim, serviceAudience: serviceAudience, serviceClients: serviceClients)
    }

    /// The audience of the backends' tokens in these tests.
    package static let serviceAudience = "https://api.test/syncgate-service"

    /// A client-credentials token for the backend `name` (`azp`), with `scope` (space-separated)
    /// and/or `scp`, signed by `key`.
    package func serviceToken(
        _ key: Key, name: String?, scope: String? = nil, scp: [String]? = nil, roles: [String]? = nil, expiresIn: TimeInterval = 3600,
        audiences: [String] = [TestIdentityProvider.serviceAudience]
    ) async throws -> String {
        var claims = Claims(exp: ExpirationClaim(value: Date().addingTimeInterval(expiresIn)), iss: Self.issuer, aud: AudienceClaim(value: audiences))
        claims.sub = name.map { "\($0)@clients" }
        claims.azp = name
        claims.scope = scope
        claims.scp = scp
        claims.roles = roles
        return try await key.collection.sign(claims, kid: JWKIdentifier(string: key.id))
    }

    /// A token signed by `key`; by default valid for an hour, for this provider's issuer and audience.
    package func token(
        _ key: Key, user: String = "alice", userClaim: String = "sub", expiresIn: TimeInterval = 3600, issuer: String = TestIdentityProvider.issuer,
        audience: String = TestIdentityProvider.audience
    ) async throws -> String {
        var claims = Claims(exp: ExpirationClaim(value: Date().addingTimeInterval(expiresIn)), iss: issuer, aud: AudienceClaim(value: [audience]))
        if userClaim == "sub" { claims.sub = user } else { claims.uid = user }
        return try await key.collection.sign(claims, kid: JWKIdentifier(string: key.id))
    }

    /// Runs `body` with the provider's JWKS endpoint up on 127.0.0.1.
    package static func with<Result: Sendable>(_ body: @Sendable (TestIdentityProvider) async throws -> Result) async throws -> Result {
        let provider = Mutex<TestIdentityProvider?>(nil)
        let router = Router()
        router.get("/.well-known/jwks.json") { _, _ -> Response in
            guard let provider = provider.withLock({ $0 }) else { return Response(status: .serviceUnavailable) }
            let (keys, down, cacheControl) = provider.state.withLock { state in
                state.fetches += 1
                return (state.published, state.down, state.cacheControl)
            }
            if down { return Response(status: .serviceUnavailable) }
            let body = try JSONSerialization.data(withJSONObject: ["keys": keys.map(\.jwk)])
            return Response(
                status: .ok, headers: [.contentType: "application/json", .cacheControl: cacheControl],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: body))
            )
        }
        return try await withTestHTTPServer(router) { port in
            let running = TestIdentityProvider(url: "http://127.0.0.1:\(port)/.well-known/jwks.json")
            provider.withLock { $0 = running }
            return try await body(running)
        }
    }
}

extension Data {
    var base64URL: String {
        base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }
}
