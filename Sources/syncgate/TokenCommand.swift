import ArgumentParser
import SyncGateCommandLine
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateServer

struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print a bearer token (HS256 JWT) for a user, signed with the configured secret."
    )

    @Option(help: "The user id (the token's sub claim)")
    var user: String

    @Option(help: "Seconds until the token expires (default 86400)")
    var ttl: Int = 86_400

    @OptionGroup var common: CommonOptions

    func validate() throws {
        try validUser(user)
        guard ttl > 0 else { throw ValidationError("--ttl must be positive") }
    }

    func run() async throws {
        let (configuration, _) = try await common.configuration()
        let secret: SigningSecret
        do {
            secret = try SigningSecret.resolve(configured: configuration.jwtSecret, database: configuration.database)
        } catch {
            throw ValidationError(error.message)
        }
        guard ttl <= configuration.jwtMaximumLifetimeSeconds else {
            throw ValidationError("--ttl \(ttl) is longer than the servers accept (SYNCGATE_JWT_MAX_LIFETIME: \(configuration.jwtMaximumLifetimeSeconds) s)")
        }
        print(try await TokenAuthority(secret: secret.value, maximumLifetimeSeconds: configuration.jwtMaximumLifetimeSeconds).issue(userID: user, ttlSeconds: ttl))
    }
}
