import JWTKit
import SyncGateWire

/// A problem with the push settings, found when they are read: nudging does not start.
package struct PushCredentialsError: Error, CustomStringConvertible, Hashable {
    package var description: String

    package init(description: String) { self.description = description }
}

/// Token-based APNs authentication: the team's `.p8` signing key, its key id and the team id.
package struct APNsCredentials: Sendable {
    package var keyID: String
    package var teamID: String
    let key: ES256PrivateKey

    package init(keyPEM: String, keyID: String, teamID: String) throws(PushCredentialsError) {
        guard !keyID.isEmpty, !teamID.isEmpty else { throw PushCredentialsError(description: "APNs needs a key id and a team id") }
        do {
            key = try ES256PrivateKey(pem: keyPEM)
        } catch {
            throw PushCredentialsError(description: "the APNs key is not a PEM P-256 private key (the .p8 file Apple issues)")
        }
        self.keyID = keyID
        self.teamID = teamID
    }
}

/// An FCM service account, from the JSON key file Google issues.
package struct FCMServiceAccount: Sendable {
    package var projectID: String
    package var clientEmail: String
    package var privateKeyID: String
    package var tokenURI: String
    let key: Insecure.RSA.PrivateKey

    package init(json: String) throws(PushCredentialsError) {
        guard let object = (try? JSONParser().parse(json))?.objectValue else {
            throw PushCredentialsError(description: "the FCM service account key is not a JSON object")
        }
        func field(_ name: String) throws(PushCredentialsError) -> String {
            guard let value = object[name]?.stringValue, !value.isEmpty else {
                throw PushCredentialsError(description: "the FCM service account key has no \(name)")
            }
            return value
        }
        projectID = try field("project_id")
        clientEmail = try field("client_email")
        privateKeyID = try field("private_key_id")
        tokenURI = try field("token_uri")
        let pem = try field("private_key")
        do {
            key = try Insecure.RSA.PrivateKey(pem: pem)
        } catch {
            throw PushCredentialsError(description: "the FCM service account's private_key is not a PEM RSA private key")
        }
    }
}
