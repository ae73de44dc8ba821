import Configuration
import Foundation
import Logging
import SyncGateCore
import SyncGateWire
import SyncGateHTTP
import SyncGateServer
import SyncGateStorage
import SyncGateTestSupport
import SyncGateWorker
import Synchronization
import SyncGateWebhooks
import SyncGatePush
import Crypto
import Testing

/// Settings: flags over `SYNCGATE_*` environment over the `--config` file over defaults.
@Suite(.timeLimit(.minutes(10))) struct SettingsTests {
    static func file(_ text: String) throws -> String {
        let path = NSTemporaryDirectory() + "syncgate-settings-\(UUID().uuidString.prefix(8)).yaml"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    static func configuration(flags: [ServerConfiguration.Setting: String] = [:], file: String? = nil, environment: [String: String] = [:]) async throws -> ServerConfiguration {
        try ServerConfiguration(reader: try await ServerConfiguration.reader(flags: flags, configFile: file, environment: environment))
    }

    /// The settings given, as the admin API shows them: by variable, from every source, secrets
    /// redacted, nothing that was not given.
    @Test func theGivenSettingsAreListedWithSecretsRedacted() async throws {
        let file = try Self.file("logLevel: debug\n")
        defer { try? FileManager.default.removeItem(atPath: file) }
        let configuration = try await Self.configuration(
            flags: [.port: "9001"], file: file,
            environment: ["SYNCGATE_JWT_SECRET": "a-very-secret-signing-secret-0123456789", "SYNCGATE_DATABASE_URL": "postgres://u:pw@db/x", "SYNCGATE_ADMIN_PORT": "8081"]
        )
        let given = Dictionary(uniqueKeysWithValues: configuration.configured.map { ($0.name, $0.value) })
        #expect(given == [
            "SYNCGATE_PORT": "9001", "SYNCGATE_LOG_LEVEL": "debug", "SYNCGATE_ADMIN_PORT": "8081",
            "SYNCGATE_JWT_SECRET": "<redacted>", "SYNCGATE_DATABASE_URL": "<redacted>",
        ])
        #expect(configuration.adminPort == 8081 && configuration.adminHost == "127.0.0.1")
    }

    /// Service tokens (the identity provider's, for backends) need the provider, and an audience
    /// of their own: the one that tells them from users' tokens.
    @Test func theServiceAudienceIsAnIdentityProviderSettingApartFromTheUsers() async throws {
        let jwks = ["SYNCGATE_JWKS_URL": "https://idp.test/jwks.json", "SYNCGATE_JWT_AUDIENCE": "app"]
        let service = ["SYNCGATE_JWT_SERVICE_AUDIENCE": "backend", "SYNCGATE_JWT_SERVICE_CLAIM": "client_id", "SYNCGATE_JWT_SERVICE_CLIENTS": "billing, reports"]
        let set = try await Self.configuration(environment: jwks.merging(service) { $1 })
        #expect(set.identityProvider?.serviceAudience == "backend" && set.identityProvider?.serviceClaim == "client_id")
        #expect(set.identityProvider?.serviceClients == ["billing", "reports"])
        let unset = try await Self.configuration(environment: jwks)
        #expect(unset.identityProvider?.serviceAudience == nil && unset.identityProvider?.serviceClaim == "azp")
        let refused: [[String: String]] = [
            jwks.merging(["SYNCGATE_JWT_SERVICE_AUDIENCE": "app", "SYNCGATE_JWT_SERVICE_CLIENTS": "billing"]) { $1 },  // the users' audience
            jwks.merging(["SYNCGATE_JWT_SERVICE_AUDIENCE": "backend"]) { $1 },  // no clients
            jwks.merging(["SYNCGATE_JWT_SERVICE_AUDIENCE": "backend", "SYNCGATE_JWT_SERVICE_CLIENTS": "bad name"]) { $1 },
            jwks.merging(["SYNCGATE_JWT_SERVICE_CLIENTS": "billing"]) { $1 },  // no audience
            jwks.merging(["SYNCGATE_JWT_SERVICE_CLAIM": "cid"]) { $1 },  // no audience
            service,  // no identity provider
        ]
        for environment in refused {
            await #expect(throws: ConfigurationError.self, "\(environment)") { try await Self.configuration(environment: environment) }
        }
    }

    @Test func flagsBeatTheEnvironmentWhichBeatsTheFileWhichBeatsTheDefaults() async throws {
        let file = try Self.file("port: 9000\nmaxAttempts: 9\nqueueLimitPerUser: 7\nlease: 90s\n")
        defer { try? FileManager.default.removeItem(atPath: file) }
        let configuration = try await Self.configuration(
            flags: [.port: "8600"], file: file, environment: ["SYNCGATE_PORT": "8500", "SYNCGATE_MAX_ATTEMPTS": "3"]
        )
        #expect(configuration.port == 8600)  // flag
        #expect(configuration.front.maximumAttempts == 3)  // environment
        #expect(configuration.worker.retryPolicy.maximumAttempts == 3)
        #expect(configuration.front.queueLimits.maximumQueuedPerUser == 7)  // file
        #expect(configuration.worker.leaseMilliseconds == 90_000)
        #expect(configuration.front.pushLimits.maximumDataDepth == 32)  // default
        #expect(configuration.database == .defaultSQLite)
    }

    /// The live connections' limits and timeouts reach the front's configuration.
    @Test func liveConnectionSettings() async throws {
        let file = try Self.file("liveConnectionsTotal: 900\nidleTimeout: 2m\n")
        defer { try? FileManager.default.removeItem(atPath: file) }
        let configuration = try await Self.configuration(file: file, environment: [
            "SYNCGATE_LIVE_CONNECTIONS_PER_USER": "3", "SYNCGATE_STREAM_MAX_LIFETIME": "10m", "SYNCGATE_KEEP_ALIVE_INTERVAL": "5s",
            "SYNCGATE_REQUEST_READ_TIMEOUT": "7s",
        ])
        #expect(configuration.front.liveLimits == .init(perUser: 3, perProcess: 900))
        #expect(configuration.front.maximumStreamLifetime == .seconds(600))
        #expect(configuration.front.keepAliveInterval == .seconds(5))
        #expect(configuration.front.requestReadTimeout == .seconds(7))
        #expect(configuration.front.idleTimeout == .seconds(120))
        let defaults = try await Self.configuration()
        #expect(defaults.front.liveLimits == .init(perUser: 20, perProcess: 25_000) && defaults.front.requestReadTimeout == .seconds(30))
    }

    @Test func pushSettingsAreReadAndChecked() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("syncgate-push-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let keyFile = directory.appendingPathComponent("AuthKey.p8").path
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
        let off = try await Self.configuration()
        #expect(!off.push.isConfigured && off.push.interval == .seconds(30))
        let on = try await Self.configuration(environment: [
            "SYNCGATE_APNS_KEY_FILE": keyFile, "SYNCGATE_APNS_KEY_ID": "KEY1234567", "SYNCGATE_APNS_TEAM_ID": "TEAM123456",
            "SYNCGATE_NUDGE_INTERVAL": "45s", "SYNCGATE_FCM_PRIORITY": "normal", "SYNCGATE_FCM_URL": "http://127.0.0.1:9999", "SYNCGATE_NUDGES": "false",
        ])
        #expect(on.push.apns?.keyID == "KEY1234567" && on.push.apns?.teamID == "TEAM123456" && on.push.fcm == nil)
        #expect(on.push.isConfigured && !on.push.enabled && on.push.interval == .seconds(45) && on.push.fcmPriority == .normal)
        #expect(on.push.fcmBaseURL == "http://127.0.0.1:9999")
        let refusals: [([String: String], String)] = [
            (["SYNCGATE_APNS_KEY_FILE": keyFile], "an APNs key needs apnsKeyId (SYNCGATE_APNS_KEY_ID) and apnsTeamId (SYNCGATE_APNS_TEAM_ID) (from the Apple Developer account)"),
            (["SYNCGATE_APNS_KEY_ID": "K"], "apnsKeyId (SYNCGATE_APNS_KEY_ID) and apnsTeamId (SYNCGATE_APNS_TEAM_ID) need the key itself: set apnsKeyFile (SYNCGATE_APNS_KEY_FILE)"),
            (["SYNCGATE_APNS_KEY": "nope", "SYNCGATE_APNS_KEY_ID": "K", "SYNCGATE_APNS_TEAM_ID": "T"], "apnsKeyFile (SYNCGATE_APNS_KEY_FILE): the APNs key is not a PEM P-256 private key (the .p8 file Apple issues)"),
            (["SYNCGATE_FCM_SERVICE_ACCOUNT": "{}"], "fcmServiceAccountFile (SYNCGATE_FCM_SERVICE_ACCOUNT_FILE): the FCM service account key has no project_id"),
            (["SYNCGATE_FCM_PRIORITY": "urgent"], "fcmPriority (SYNCGATE_FCM_PRIORITY) must be high or normal, got 'urgent'"),
            (["SYNCGATE_NUDGE_INTERVAL": "500ms"], "nudgeInterval (SYNCGATE_NUDGE_INTERVAL) must be between 1s and 1h, got 500 ms"),
            (["SYNCGATE_FCM_URL": "ftp://x"], "fcmUrl (SYNCGATE_FCM_URL) must be an http(s) URL without a trailing slash, got 'ftp://x'"),
        ]
        for (environment, message) in refusals {
            await #expect(throws: ConfigurationError(message), "\(environment)") { try await Self.configuration(environment: environment) }
        }
    }

    @Test func webhookBatchIntervalIsReadAndBounded() async throws {
        #expect(try await Self.configuration(environment: ["SYNCGATE_WEBHOOK_BATCH_INTERVAL": "2s"]).webhooks.announceInterval == .seconds(2))
        #expect(try await Self.configuration(environment: ["SYNCGATE_WEBHOOK_BATCH_INTERVAL": "10ms"]).webhooks.announceInterval == .milliseconds(100))
        #expect(try await Self.configuration(environment: ["SYNCGATE_WEBHOOK_BATCH_INTERVAL": "1h"]).webhooks.announceInterval == .seconds(60))
        #expect(try await Self.configuration().webhooks.announceInterval == .seconds(1))
    }

    /// Read replicas: a comma-separated list of standbys of a PostgreSQL primary.
    @Test func readReplicasAreAListOfStandbys() async throws {
        let configuration = try await Self.configuration(environment: [
            "SYNCGATE_DATABASE_URL": "postgres://u@primary:5432/db",
            "SYNCGATE_READ_DATABASE_URL": "postgres://u@standby1:5432/db?sslmode=require, postgres://u@standby2:5433/db",
        ])
        #expect(configuration.readDatabases.map { "\($0.host):\($0.port)" } == ["standby1:5432", "standby2:5433"])
        #expect(configuration.readDatabases.map(\.tlsMode) == ["require", "disable"])
        #expect(try await Self.configuration().readDatabases.isEmpty)
    }

    @Test func theConfigFileCanComeFromTheEnvironment() async throws {
        let file = try Self.file("databaseUrl: sqlite:/tmp/elsewhere.sqlite\n")
        defer { try? FileManager.default.removeItem(atPath: file) }
        let configuration = try await Self.configuration(environment: ["SYNCGATE_CONFIG": file])
        #expect(configuration.database == .sqlite(path: "/tmp/elsewhere.sqlite"))
    }

    @Test(arguments: [
        (["SYNCGATE_PORT": "eighty"], "port (SYNCGATE_PORT) must be an integer"),
        (["SYNCGATE_WORKERS": "-1"], "workers (SYNCGATE_WORKERS) must be an integer from 0"),
        (["SYNCGATE_LEASE": "soon"], "lease (SYNCGATE_LEASE) must be a duration"),
        (["SYNCGATE_DATABASE_URL": "mysql://x"], "databaseUrl (SYNCGATE_DATABASE_URL)"),
        // Past ten years a duration overflows a clock reading or a PostgreSQL interval.
        (["SYNCGATE_WEBHOOK_TIMEOUT": "9223372036854775807ms"], "webhookTimeout (SYNCGATE_WEBHOOK_TIMEOUT) must be a duration"),
        (["SYNCGATE_LEASE": "106751991167d"], "lease (SYNCGATE_LEASE) must be a duration"),
        (["SYNCGATE_JOB_RETENTION": "3651d"], "jobRetention (SYNCGATE_JOB_RETENTION) must be a duration"),
        // Days written without their unit are seconds: too short to be meant.
        (["SYNCGATE_IDEMPOTENCY_RETENTION": "30"], "idempotencyRetention (SYNCGATE_IDEMPOTENCY_RETENTION) must be at least 1h"),
        (["SYNCGATE_TOMBSTONE_RETENTION": "30"], "tombstoneRetention (SYNCGATE_TOMBSTONE_RETENTION) must be at least 1h"),
        (["SYNCGATE_JOB_RETENTION": "0"], "jobRetention (SYNCGATE_JOB_RETENTION) must be at least 1m"),
        (["SYNCGATE_READ_DATABASE_URL": "postgres://u@standby/db"], "readDatabaseUrl (SYNCGATE_READ_DATABASE_URL) needs a PostgreSQL primary"),
        (
            ["SYNCGATE_DATABASE_URL": "postgres://u@primary/db", "SYNCGATE_READ_DATABASE_URL": "postgres://u@standby/db,sqlite:/tmp/x.sqlite"],
            "readDatabaseUrl (SYNCGATE_READ_DATABASE_URL) must be postgres:// URLs"
        ),
    ])
    func aBadValueNamesItsSettingAndVariable(_ environment: [String: String], _ message: String) async throws {
        await #expect {
            try await Self.configuration(environment: environment)
        } throws: { error in
            (error as? ConfigurationError)?.message.contains(message) == true
        }
    }

    /// An empty value counts as unset in every source: an empty variable (a secret's key with
    /// nothing in it) or flag leaves the file's value, not the default.
    @Test func anEmptyValueLeavesTheNextSource() async throws {
        let file = try Self.file("databaseUrl: postgres://u@db:5432/x\nport: 9001\nidempotencyRetention: 2d\n")
        defer { try? FileManager.default.removeItem(atPath: file) }
        let configuration = try await Self.configuration(
            flags: [.port: ""], file: file,
            environment: ["SYNCGATE_DATABASE_URL": "", "SYNCGATE_PORT": "", "SYNCGATE_IDEMPOTENCY_RETENTION": ""]
        )
        guard case .postgres(let location) = configuration.database else {
            Issue.record("expected the file's database, got \(configuration.database)")
            return
        }
        #expect(location.host == "db")
        #expect(configuration.port == 9001)
        #expect(configuration.retention.idempotencyMilliseconds == 2 * 86_400_000)
        #expect(configuration.configured.map(\.name).sorted() == ["SYNCGATE_DATABASE_URL", "SYNCGATE_IDEMPOTENCY_RETENTION", "SYNCGATE_PORT"])
        // Retention given with a unit, at and past its floor, is taken as it is.
        #expect(try await Self.configuration(environment: ["SYNCGATE_IDEMPOTENCY_RETENTION": "3600"]).retention.idempotencyMilliseconds == 3_600_000)
        #expect(try await Self.configuration(environment: ["SYNCGATE_JOB_RETENTION": "3650d"]).retention.finishedJobsMilliseconds == 3650 * 86_400_000)
        // With its unit a short retention is meant (a benchmark's, docs/performance.md).
        #expect(try await Self.configuration(environment: ["SYNCGATE_IDEMPOTENCY_RETENTION": "20s"]).retention.idempotencyMilliseconds == 20_000)
    }

    @Test func aMissingConfigFileIsAnError() async throws {
        await #expect(throws: (any Error).self) { try await Self.configuration(file: "/nonexistent/syncgate.yaml") }
    }

    /// Every setting read is logged at debug with its source; the database URL and the signing
    /// secret never appear.
    @Test func secretsAreRedactedWhenSettingsAreLogged() async throws {
        let lines = LogCapture()
        let logger = Logger(label: "settings") { _ in lines.handler }
        let reader = try await ServerConfiguration.reader(
            flags: [.jwtSecret: "flag-secret-0123456789-0123456789"],
            environment: ["SYNCGATE_DATABASE_URL": "postgres://syncgate:hunter2-password@db/syncgate", "SYNCGATE_PORT": "8123"],
            accessLogger: logger
        )
        let configuration = try ServerConfiguration(reader: reader)
        #expect(configuration.jwtSecret == "flag-secret-0123456789-0123456789")
        let text = lines.text
        #expect(text.contains("databaseUrl") && text.contains("jwtSecret") && text.contains("8123"), "\(text)")
        #expect(!text.contains("hunter2") && !text.contains("flag-secret"), "\(text)")
        #expect(text.contains("REDACTED"))
    }

    /// docs/configuration.md's table names every setting's variable and file key.
    @Test func everySettingIsDocumented() throws {
        let reference = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        for setting in ServerConfiguration.Setting.all {
            #expect(reference.contains("`\(setting.environmentName)`"), "\(setting.environmentName) is not in docs/configuration.md")
            #expect(reference.contains("`\(setting.key)`"), "\(setting.key) is not in docs/configuration.md")
        }
    }
}

/// A log handler that keeps every line, metadata included.
final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])

    var text: String { lines.withLock { $0.joined(separator: "\n") } }

    var handler: Handler { Handler(capture: self) }

    struct Handler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String, file: String, function: String, line: UInt) {
            let all = self.metadata.merging(metadata ?? [:]) { _, new in new }
            capture.lines.withLock { $0.append("\(level) \(message) \(all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))") }
        }
    }
}

/// CI runs every driver; a local loop may pick some with `SYNCGATE_TEST_DRIVERS`.
@Suite(.timeLimit(.minutes(10))) struct DriverSelectionTests {
    @Test func continuousIntegrationRunsEveryDriver() {
        if Driver.isCI {
            #expect(Driver.selected == Driver.allCases, "CI=true must test every driver (SYNCGATE_TEST_DRIVERS narrows it)")
        }
        #expect(!Driver.selected.isEmpty, "SYNCGATE_TEST_DRIVERS names no known driver")
    }
}
