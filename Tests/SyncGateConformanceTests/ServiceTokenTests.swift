import Foundation
import HTTPTypes
import Logging
import SyncGateCore
@testable import SyncGateHTTP
import SyncGateServer
import SyncGateStorage
import SyncGateTestSupport
import SyncGateWire
import Testing

/// Service tokens from the app's identity provider (OAuth client credentials), beside service
/// keys: a backend's token works on the service API only, a user's token never does there, and
/// neither passes for the other.
@Suite(.timeLimit(.minutes(10))) struct ServiceTokenTests {
    /// The backends whose tokens the tests' servers accept.
    static let clients: Set<String> = ["billing", "ops", "idle", "azure-job", "reports"]

    static func authority(_ provider: TestIdentityProvider, serviceAudience: String? = TestIdentityProvider.serviceAudience) async -> TokenAuthority {
        let configuration = provider.configuration(serviceAudience: serviceAudience, serviceClients: serviceAudience == nil ? [] : clients)
        let keys = IdentityProviderKeys(configuration: configuration, minimumRefreshInterval: .milliseconds(300), logger: IdentityProviderTests.logger)
        return await TokenAuthority(secret: nil, identityProvider: keys)
    }

    /// `accepted <name> <scopes>`, or the protocol error code the token gets as a service's.
    static func service(_ authority: TokenAuthority, _ token: String) async -> String {
        do {
            let service = try await authority.verifyService(token)
            return "accepted \(service.name) \(service.scopes.sorted().map(\.rawValue).joined(separator: ","))"
        } catch {
            return error.code.rawValue
        }
    }

    @Test func aServiceTokenNamesItsBackendAndItsSyncGateScopes() async throws {
        try await TestIdentityProvider.with { provider in
            let key = try await TestIdentityProvider.Key.es256("k1")
            provider.publish([key])
            let authority = await Self.authority(provider)
            #expect(authority.acceptsServiceTokens)
            // `scope` is space-separated; `scp` a list; scopes of other APIs are ignored.
            let both = try await provider.serviceToken(key, name: "billing", scope: "read:invoices syncgate:write syncgate:read")
            #expect(await Self.service(authority, both) == "accepted billing read,write")
            let listed = try await provider.serviceToken(key, name: "ops", scp: ["syncgate:admin", "syncgate:bogus"])
            #expect(await Self.service(authority, listed) == "accepted ops admin")
            let none = try await provider.serviceToken(key, name: "idle")
            #expect(await Self.service(authority, none) == "accepted idle ")
            // Azure AD writes an application's permissions in `roles`.
            let azure = try await provider.serviceToken(key, name: "azure-job", roles: ["syncgate:read"])
            #expect(await Self.service(authority, azure) == "accepted azure-job read")

            let refused: [(String, String)] = [
                ("no name", try await provider.serviceToken(key, name: nil, scope: "syncgate:write")),
                ("a name that is no service name", try await provider.serviceToken(key, name: "bad name!", scope: "syncgate:write")),
                // A user of the mobile app asked the provider for the service audience and scope
                // (a provider may grant that): its client is not one of the backends.
                ("a user's token for the service audience", try await provider.serviceToken(key, name: "mobile-app", scope: "syncgate:write")),
                ("a user's audience", try await provider.serviceToken(key, name: "billing", scope: "syncgate:write", audiences: [TestIdentityProvider.audience])),
                ("expired", try await provider.serviceToken(key, name: "billing", scope: "syncgate:write", expiresIn: -120)),
                ("a user's token", try await provider.token(key, user: "alice")),
                ("HS256", try await TokenAuthority(secret: HTTPHarness.secret).issue(userID: "billing", ttlSeconds: 600)),
            ]
            for (name, token) in refused {
                #expect(await Self.service(authority, token) == "UNAUTHENTICATED", "\(name)")
            }
            // A service token never passes as a user's, even one that names the users' audience too.
            #expect(await IdentityProviderTests.code(authority, both) == "UNAUTHENTICATED")
            let twoFaced = try await provider.serviceToken(
                key, name: "billing", scope: "syncgate:write", audiences: [TestIdentityProvider.audience, TestIdentityProvider.serviceAudience]
            )
            #expect(await IdentityProviderTests.code(authority, twoFaced) == "UNAUTHENTICATED")
            #expect(await Self.service(authority, twoFaced) == "accepted billing write")
            // Without a service audience, the provider's tokens are users' only.
            let usersOnly = await Self.authority(provider, serviceAudience: nil)
            #expect(!usersOnly.acceptsServiceTokens)
            #expect(await Self.service(usersOnly, both) == "UNAUTHENTICATED")
        }
    }

    @Test(arguments: Driver.selected)
    func aBackendWritesAndReadsWithItsProvidersToken(_ driver: Driver) async throws {
        try await TestIdentityProvider.with { provider in
            let key = try await TestIdentityProvider.Key.rs256("k1")
            provider.publish([key])
            let configuration = provider.configuration(serviceAudience: TestIdentityProvider.serviceAudience, serviceClients: Self.clients)
            try await HTTPHarness.with(driver, server: { $0.identityProvider = configuration }) { http in
                func headers(_ token: String) -> HTTPFields { [.authorization: "Bearer \(token)", .contentType: "application/json"] }
                let writer = try await provider.serviceToken(key, name: "billing", scope: "syncgate:write syncgate:read")
                let body = JSONValue.object(["user_id": "alice", "operations": [Op.create("weightLogs", "w1", ["kg": 70]).json]]).serialized()
                let pushed = try await http.send(.post, "/v1/service/push?wait=30000", headers: headers(writer), body: body)
                #expect(pushed.status == 200 && pushed.json?["results"]?[0]?["status"] == "applied", "\(String(describing: pushed.json))")
                let page = try await http.send(.get, "/v1/service/pull?user_id=alice", headers: headers(writer))
                let change = page.json?["changes"]?.arrayValue?.first { $0["entity_id"] == "w1" }
                #expect(change?["origin"] == "service:billing")

                // Scopes hold as for keys: a reader cannot write.
                let reader = try await provider.serviceToken(key, name: "reports", scope: "syncgate:read")
                #expect(try await http.send(.post, "/v1/service/push?wait=0", headers: headers(reader), body: body).status == 403)
                #expect(try await http.send(.get, "/v1/service/pull?user_id=alice", headers: headers(reader)).status == 200)

                // Neither passes for the other: the backend's token on a device route, a user's
                // token from the same provider on the service API.
                var deviceHeaders = headers(writer)
                deviceHeaders[HTTPField.Name("X-Device-Id")!] = "d1"
                #expect(try await http.send(.get, "/v1/sync/pull", headers: deviceHeaders).status == 401)
                let user = try await provider.token(key, user: "alice")
                #expect(try await http.send(.get, "/v1/service/pull?user_id=alice", headers: headers(user)).status == 401)
                #expect(try await http.send(.get, "/v1/service/pull?user_id=alice", headers: headers(writer)).status == 200)
            }
        }
    }
}
