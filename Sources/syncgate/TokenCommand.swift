import ArgumentParser
import SyncGateCore
import SyncGateHTTP

struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print a bearer token (HS256 JWT) for a user, signed with the configured secret."
    )

    @Option(help: "The user id (the token's sub claim)")
    var user: String

    @Option(help: "Seconds until the token expires (default 86400)")
    var ttl: Int = 86_400

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    func validate() throws {
        guard IdentifierLimits.isValidUserID(user) else { throw ValidationError("--user must be 1 to 128 characters") }
        guard ttl > 0 else { throw ValidationError("--ttl must be positive") }
    }

    func run() async throws {
        let logger = try logging.makeLogger()
        let secret = try Runtime.jwtSecret(for: try database.resolved(), logger: logger)
        print(try await TokenAuthority(secret: secret.value).issue(userID: user, ttlSeconds: ttl))
    }
}
