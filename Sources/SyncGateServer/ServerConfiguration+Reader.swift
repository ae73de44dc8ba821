package import Configuration
import Foundation
import SyncGateWebhooks
import SyncGatePush
import SyncGateConcurrency
package import Logging
package import SyncGateCore
import SyncGateDialects
import SyncGateWire
import SyncGateHTTP
import SyncGateStorage
import SyncGateWorker
import SystemPackage

extension ServerConfiguration {
    /// One setting: its key in a configuration file and, with the `SYNCGATE_` prefix, its
    /// environment variable (`queueLimitPerUser` ↔ `SYNCGATE_QUEUE_LIMIT_PER_USER`).
    package struct Setting: Sendable, Hashable {
        package var key: String
        package var isSecret: Bool

        package init(_ key: String, isSecret: Bool = false) {
            self.key = key
            self.isSecret = isSecret
        }

        /// The environment variable that sets it.
        package var environmentName: String {
            var name = "SYNCGATE_"
            for character in key {
                if character.isUppercase { name += "_" }
                name += character.uppercased()
            }
            return name
        }

        package static let databaseURL = Setting("databaseUrl", isSecret: true)
        package static let readDatabaseURL = Setting("readDatabaseUrl", isSecret: true)
        package static let jwtSecret = Setting("jwtSecret", isSecret: true)
        package static let jwtMaxLifetime = Setting("jwtMaxLifetime")
        package static let host = Setting("host")
        package static let port = Setting("port")
        package static let workers = Setting("workers")
        package static let workerConcurrency = Setting("workerConcurrency")
        package static let workerBatch = Setting("workerBatch")
        package static let collections = Setting("collections")
        package static let logLevel = Setting("logLevel")
        package static let maxBodyBytes = Setting("maxBodyBytes")
        package static let maxOperations = Setting("maxOperations")
        package static let maxDataBytes = Setting("maxDataBytes")
        package static let maxDataDepth = Setting("maxDataDepth")
        package static let maxDocumentBytes = Setting("maxDocumentBytes")
        package static let queueLimitPerUser = Setting("queueLimitPerUser")
        package static let queueLimitTotal = Setting("queueLimitTotal")
        package static let maxAttempts = Setting("maxAttempts")
        package static let lease = Setting("lease")
        package static let pollInterval = Setting("pollInterval")
        package static let jobRetention = Setting("jobRetention")
        package static let tombstoneRetention = Setting("tombstoneRetention")
        package static let idempotencyRetention = Setting("idempotencyRetention")
        package static let maintenanceInterval = Setting("maintenanceInterval")
        package static let liveConnectionsPerUser = Setting("liveConnectionsPerUser")
        package static let liveConnectionsTotal = Setting("liveConnectionsTotal")
        package static let streamMaxLifetime = Setting("streamMaxLifetime")
        package static let keepAliveInterval = Setting("keepAliveInterval")
        package static let requestReadTimeout = Setting("requestReadTimeout")
        package static let idleTimeout = Setting("idleTimeout")
        package static let logFormat = Setting("logFormat")
        package static let metricsPort = Setting("metricsPort")
        package static let metricsHost = Setting("metricsHost")
        package static let adminPort = Setting("adminPort")
        package static let adminHost = Setting("adminHost")
        package static let jwksUrl = Setting("jwksUrl")
        package static let jwtIssuer = Setting("jwtIssuer")
        package static let jwtAudience = Setting("jwtAudience")
        package static let jwtUserClaim = Setting("jwtUserClaim")
        package static let jwtServiceAudience = Setting("jwtServiceAudience")
        package static let jwtServiceClaim = Setting("jwtServiceClaim")
        package static let jwtServiceClients = Setting("jwtServiceClients")
        package static let dialects = Setting("dialects")
        package static let webhooks = Setting("webhooks")
        package static let webhookAllowPrivate = Setting("webhookAllowPrivate")
        package static let webhookTimeout = Setting("webhookTimeout")
        package static let webhookConcurrency = Setting("webhookConcurrency")
        package static let webhookReplayWindow = Setting("webhookReplayWindow")
        package static let webhookBatchInterval = Setting("webhookBatchInterval")
        package static let apnsKeyFile = Setting("apnsKeyFile")
        package static let apnsKey = Setting("apnsKey", isSecret: true)
        package static let apnsKeyId = Setting("apnsKeyId")
        package static let apnsTeamId = Setting("apnsTeamId")
        package static let fcmServiceAccountFile = Setting("fcmServiceAccountFile")
        package static let fcmServiceAccount = Setting("fcmServiceAccount", isSecret: true)
        package static let fcmPriority = Setting("fcmPriority")
        package static let fcmUrl = Setting("fcmUrl")
        package static let nudgeInterval = Setting("nudgeInterval")
        package static let nudges = Setting("nudges")

        /// Every setting, for the README's table and the tests that keep it complete.
        package static let all: [Setting] = [
            databaseURL, readDatabaseURL, jwtSecret, jwtMaxLifetime, host, port, workers, workerConcurrency, workerBatch, collections, logLevel, maxBodyBytes, maxOperations,
            maxDataBytes, maxDataDepth, maxDocumentBytes, queueLimitPerUser, queueLimitTotal, maxAttempts, lease, pollInterval, jobRetention,
            tombstoneRetention, idempotencyRetention, maintenanceInterval, liveConnectionsPerUser, liveConnectionsTotal, streamMaxLifetime,
            keepAliveInterval, requestReadTimeout, idleTimeout, logFormat, metricsPort, metricsHost, adminPort, adminHost, jwksUrl, jwtIssuer, jwtAudience,
            jwtUserClaim, jwtServiceAudience, jwtServiceClaim, jwtServiceClients, dialects, webhooks, webhookAllowPrivate, webhookTimeout,
            webhookConcurrency, webhookReplayWindow, webhookBatchInterval, apnsKeyFile, apnsKey, apnsKeyId, apnsTeamId, fcmServiceAccountFile,
            fcmServiceAccount, fcmPriority, fcmUrl, nudgeInterval, nudges,
        ]
    }

    /// The layered sources of settings: `flags` (highest), then `SYNCGATE_*` environment variables,
    /// then the YAML file at `configFile` (or `SYNCGATE_CONFIG`), then the defaults.
    ///
    /// - Parameter accessLogger: logs every setting read, with its source, at debug level; secrets
    ///   (the database URL, the signing secret) appear as `<REDACTED>`.
    package static func reader(
        flags: [Setting: String], configFile: String? = nil, environment: [String: String]? = nil, accessLogger: Logger? = nil
    ) async throws -> ConfigReader {
        // An empty value is no value, in every source: an empty variable (a secret's key with
        // nothing in it, `${UNSET}` in a manifest) leaves the file's value or the default.
        let environment = (environment ?? ProcessInfo.processInfo.environment).filter { !$0.value.isEmpty }
        var values: [AbsoluteConfigKey: ConfigValue] = [:]
        for (setting, value) in flags where !value.isEmpty {
            values[AbsoluteConfigKey([setting.key])] = ConfigValue(.string(value), isSecret: setting.isSecret)
        }
        let secrets = Set(Setting.all.filter(\.isSecret).map(\.environmentName))
        var providers: [any ConfigProvider] = [
            InMemoryProvider(name: "command line", values: values),
            EnvironmentVariablesProvider(environmentVariables: environment, secretsSpecifier: .specific(secrets)).prefixKeys(with: "syncgate"),
        ]
        if let path = configFile ?? environment["SYNCGATE_CONFIG"].flatMap({ $0.isEmpty ? nil : $0 }) {
            do {
                providers.append(try await FileProvider<YAMLSnapshot>(filePath: FilePath(path)))
            } catch {
                throw ConfigurationError("configuration file \(path): \(error)")
            }
        }
        return ConfigReader(providers: providers, accessReporter: accessLogger.map { AccessLogger(logger: $0) })
    }

    /// Reads and checks every setting; a bad value names its setting and variable.
    package init(reader: ConfigReader) throws(ConfigurationError) {
        self.init()
        let values = SettingValues(reader: reader)
        if let text = values.string(.databaseURL) {
            do {
                database = try DatabaseURL(parsing: text)
            } catch {
                throw ConfigurationError("\(Setting.databaseURL.describe): \(error)")
            }
        }
        if let list = values.string(.readDatabaseURL) {
            guard case .postgres = database else {
                throw ConfigurationError("\(Setting.readDatabaseURL.describe) needs a PostgreSQL primary in \(Setting.databaseURL.describe)")
            }
            for text in list.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !text.isEmpty {
                guard case .postgres(let location) = try? DatabaseURL(parsing: text) else {
                    throw ConfigurationError("\(Setting.readDatabaseURL.describe) must be postgres:// URLs of hot standbys separated by commas")
                }
                readDatabases.append(location)
            }
        }
        jwtSecret = values.string(.jwtSecret)
        if let lifetime = try values.milliseconds(.jwtMaxLifetime) {
            guard lifetime >= 60_000, lifetime / 1000 <= Int64(Int32.max) else {
                throw ConfigurationError("\(Setting.jwtMaxLifetime.describe) must be between 1m and 68 years, got \(lifetime / 1000) s")
            }
            jwtMaximumLifetimeSeconds = Int(lifetime / 1000)
        }
        logLevel = values.string(.logLevel) ?? logLevel
        if let format = values.string(.logFormat) {
            guard let parsed = LogFormat(rawValue: format) else {
                throw ConfigurationError("\(Setting.logFormat.describe) must be text or json, got '\(format)'")
            }
            logFormat = parsed
        }
        metricsPort = try values.integer(.metricsPort, in: 1...65535)
        metricsHost = values.string(.metricsHost) ?? metricsHost
        adminPort = try values.integer(.adminPort, in: 1...65535)
        adminHost = values.string(.adminHost) ?? adminHost
        if let list = values.string(.jwksUrl) {
            let urls = list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            for url in urls where !(url.hasPrefix("https://") || url.hasPrefix("http://")) {
                throw ConfigurationError("\(Setting.jwksUrl.describe) must be http(s) URLs separated by commas, got '\(url)'")
            }
            let serviceAudience = values.string(.jwtServiceAudience)
            let clients = Set((values.string(.jwtServiceClients) ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
            if let serviceAudience {
                if serviceAudience == values.string(.jwtAudience) {
                    throw ConfigurationError("\(Setting.jwtServiceAudience.describe) must differ from \(Setting.jwtAudience.describe): it tells a backend's tokens from users'")
                }
                guard !clients.isEmpty else {
                    throw ConfigurationError("\(Setting.jwtServiceAudience.describe) needs \(Setting.jwtServiceClients.describe): the client ids of your backends, comma-separated")
                }
                for client in clients where !NewServiceKey.isValidName(client) {
                    throw ConfigurationError("\(Setting.jwtServiceClients.describe): '\(client.prefix(64))' is not 1 to 64 characters of A-Z a-z 0-9 . _ -")
                }
            } else if values.string(.jwtServiceClaim) != nil || !clients.isEmpty {
                throw ConfigurationError("\(Setting.jwtServiceClaim.describe) and \(Setting.jwtServiceClients.describe) apply to service tokens: set \(Setting.jwtServiceAudience.describe) too")
            }
            identityProvider = IdentityProviderKeys.Configuration(
                jwksURLs: urls, issuer: values.string(.jwtIssuer), audience: values.string(.jwtAudience),
                userClaim: values.string(.jwtUserClaim) ?? "sub", serviceAudience: serviceAudience,
                serviceClaim: values.string(.jwtServiceClaim) ?? "azp", serviceClients: clients
            )
        } else if [Setting.jwtIssuer, .jwtAudience, .jwtUserClaim, .jwtServiceAudience, .jwtServiceClaim, .jwtServiceClients].contains(where: { values.string($0) != nil }) {
            throw ConfigurationError(
                "\(Setting.jwtIssuer.describe), \(Setting.jwtAudience.describe), \(Setting.jwtUserClaim.describe) and the service token settings apply to an identity provider's tokens: set \(Setting.jwksUrl.describe) too"
            )
        }
        if let list = values.string(.dialects) {
            for name in list.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !name.isEmpty {
                guard let dialect = Dialect(rawValue: name) else {
                    let known = Dialect.allCases.map(\.rawValue).joined(separator: ", ")
                    throw ConfigurationError("\(Setting.dialects.describe) must be dialects separated by commas (\(known)), got '\(name.prefix(64))'")
                }
                dialects.insert(dialect)
            }
        }
        host = values.string(.host) ?? host
        port = try values.integer(.port, in: 1...65535) ?? port
        workers = try values.integer(.workers, in: 0...1024) ?? workers
        workerConcurrency = try values.integer(.workerConcurrency, in: 1...1024) ?? workerConcurrency
        worker.batchLimit = try values.integer(.workerBatch, in: 1...1024) ?? worker.batchLimit
        if let path = values.string(.collections) {
            let text: String
            do {
                text = try String(contentsOfFile: path, encoding: .utf8)
            } catch {
                throw ConfigurationError("cannot read entity types file \(path): \(error.localizedDescription)")
            }
            collections = try Collections.parse(yaml: text, source: path)
        }

        front.maximumBodyBytes = try values.integer(.maxBodyBytes, in: 1...Int.max) ?? front.maximumBodyBytes
        front.pushLimits.maximumOperations = try values.integer(.maxOperations, in: 1...Int.max) ?? front.pushLimits.maximumOperations
        front.pushLimits.maximumDataBytes = try values.integer(.maxDataBytes, in: 1...Int.max) ?? front.pushLimits.maximumDataBytes
        front.pushLimits.maximumDataDepth = try values.integer(.maxDataDepth, in: 1...512) ?? front.pushLimits.maximumDataDepth
        front.queueLimits.maximumQueuedPerUser = try values.integer(.queueLimitPerUser, in: 1...Int.max) ?? front.queueLimits.maximumQueuedPerUser
        front.queueLimits.maximumQueuedTotal = try values.integer(.queueLimitTotal, in: 1...Int.max) ?? front.queueLimits.maximumQueuedTotal
        front.maximumAttempts = try values.integer(.maxAttempts, in: 1...1000) ?? front.maximumAttempts
        worker.retryPolicy.maximumAttempts = front.maximumAttempts
        if let poll = try values.milliseconds(.pollInterval) {
            front.pollInterval = .milliseconds(max(poll, 10))
            worker.pollInterval = front.pollInterval
        }
        if let lease = try values.milliseconds(.lease) {
            worker.leaseMilliseconds = max(lease, 1000)
            worker.heartbeatInterval = .milliseconds(max(worker.leaseMilliseconds / 3, 100))
        }
        // Floors for a bare number, to catch a count of days written without its unit (`30`
        // reads as seconds): records kept for seconds would apply a retried push twice, and a
        // tombstone purged at once sends every device back to a full resync.
        retention.finishedJobsMilliseconds = try values.milliseconds(.jobRetention, atLeast: 60_000) ?? retention.finishedJobsMilliseconds
        retention.tombstonesMilliseconds = try values.milliseconds(.tombstoneRetention, atLeast: 3_600_000) ?? retention.tombstonesMilliseconds
        retention.idempotencyMilliseconds = try values.milliseconds(.idempotencyRetention, atLeast: 3_600_000) ?? retention.idempotencyMilliseconds
        if let interval = try values.milliseconds(.maintenanceInterval) { maintenanceInterval = .milliseconds(max(interval, 100)) }
        front.liveLimits.perUser = try values.integer(.liveConnectionsPerUser, in: 1...Int.max) ?? front.liveLimits.perUser
        front.liveLimits.perProcess = try values.integer(.liveConnectionsTotal, in: 1...Int.max) ?? front.liveLimits.perProcess
        if let lifetime = try values.milliseconds(.streamMaxLifetime) { front.maximumStreamLifetime = .milliseconds(max(lifetime, 1000)) }
        if let keepAlive = try values.milliseconds(.keepAliveInterval) { front.keepAliveInterval = .milliseconds(max(keepAlive, 100)) }
        if let timeout = try values.milliseconds(.requestReadTimeout) { front.requestReadTimeout = .milliseconds(max(timeout, 100)) }
        if let timeout = try values.milliseconds(.idleTimeout) { front.idleTimeout = .milliseconds(max(timeout, 100)) }
        collections.documentLimits.maximumBytes = try values.integer(.maxDocumentBytes, in: 1024...Int.max) ?? collections.documentLimits.maximumBytes
        collections.documentLimits.metadataRetentionMilliseconds = retention.tombstonesMilliseconds
        webhooks.enabled = try values.boolean(.webhooks) ?? webhooks.enabled
        webhooks.allowPrivateAddresses = try values.boolean(.webhookAllowPrivate) ?? webhooks.allowPrivateAddresses
        if let timeout = try values.milliseconds(.webhookTimeout) { webhooks.timeout = .milliseconds(max(timeout, 100)) }
        webhooks.concurrency = try values.integer(.webhookConcurrency, in: 1...1024) ?? webhooks.concurrency
        webhooks.perSubscription = max(1, webhooks.concurrency / 2)
        webhooks.replayWindowMilliseconds = try values.milliseconds(.webhookReplayWindow) ?? webhooks.replayWindowMilliseconds
        if let interval = try values.milliseconds(.webhookBatchInterval) { webhooks.announceInterval = .milliseconds(min(max(interval, 100), 60_000)) }
        webhooks.leaseMilliseconds = webhooks.timeout.wholeMilliseconds + 20_000
        try readPush(values)
        configured = Setting.all.compactMap { setting in
            values.string(setting).map { (setting.environmentName, setting.isSecret ? "<redacted>" : $0) }
        }
    }

    /// Push nudges: credentials from files or (secret) values, never logged; without either
    /// provider's, nudging stays off.
    private mutating func readPush(_ values: SettingValues) throws(ConfigurationError) {
        func secret(_ file: Setting, _ value: Setting) throws(ConfigurationError) -> String? {
            if let text = values.string(value) { return text }
            guard let path = values.string(file) else { return nil }
            do {
                return try String(contentsOfFile: path, encoding: .utf8)
            } catch {
                throw ConfigurationError("\(file.describe): cannot read \(path): \(error.localizedDescription)")
            }
        }
        if let pem = try secret(.apnsKeyFile, .apnsKey) {
            guard let keyID = values.string(.apnsKeyId), let teamID = values.string(.apnsTeamId) else {
                throw ConfigurationError("an APNs key needs \(Setting.apnsKeyId.describe) and \(Setting.apnsTeamId.describe) (from the Apple Developer account)")
            }
            do {
                push.apns = try APNsCredentials(keyPEM: pem, keyID: keyID, teamID: teamID)
            } catch {
                throw ConfigurationError("\(Setting.apnsKeyFile.describe): \(error)")
            }
        } else if values.string(.apnsKeyId) != nil || values.string(.apnsTeamId) != nil {
            throw ConfigurationError("\(Setting.apnsKeyId.describe) and \(Setting.apnsTeamId.describe) need the key itself: set \(Setting.apnsKeyFile.describe)")
        }
        if let json = try secret(.fcmServiceAccountFile, .fcmServiceAccount) {
            do {
                push.fcm = try FCMServiceAccount(json: json)
            } catch {
                throw ConfigurationError("\(Setting.fcmServiceAccountFile.describe): \(error)")
            }
        }
        if let priority = values.string(.fcmPriority) {
            guard let parsed = FCMPriority(rawValue: priority.lowercased()) else {
                throw ConfigurationError("\(Setting.fcmPriority.describe) must be high or normal, got '\(priority.prefix(32))'")
            }
            push.fcmPriority = parsed
        }
        if let url = values.string(.fcmUrl) {
            guard url.hasPrefix("https://") || url.hasPrefix("http://"), !url.hasSuffix("/") else {
                throw ConfigurationError("\(Setting.fcmUrl.describe) must be an http(s) URL without a trailing slash, got '\(url.prefix(64))'")
            }
            push.fcmBaseURL = url
        }
        if let interval = try values.milliseconds(.nudgeInterval) {
            guard (1000...3_600_000).contains(interval) else {
                throw ConfigurationError("\(Setting.nudgeInterval.describe) must be between 1s and 1h, got \(interval) ms")
            }
            push.interval = .milliseconds(interval)
        }
        push.enabled = try values.boolean(.nudges) ?? push.enabled
    }

}

extension ServerConfiguration.Setting {
    /// `key (SYNCGATE_KEY)`, for error messages.
    var describe: String { "\(key) (\(environmentName))" }
}

/// Typed reads of settings, each value read as text and checked here so a bad one is an error
/// that names it (a reader method would quietly fall back to the default).
struct SettingValues {
    let reader: ConfigReader

    func string(_ setting: ServerConfiguration.Setting) -> String? {
        guard let value = reader.string(forKey: ConfigKey(setting.key), isSecret: setting.isSecret), !value.isEmpty else { return nil }
        return value
    }

    func integer(_ setting: ServerConfiguration.Setting, in range: ClosedRange<Int>) throws(ConfigurationError) -> Int? {
        guard let text = string(setting) else { return nil }
        guard let value = Int(text.trimmingCharacters(in: .whitespaces)), range.contains(value) else {
            throw ConfigurationError("\(setting.describe) must be an integer from \(range.lowerBound) to \(range.upperBound), got '\(text)'")
        }
        return value
    }

    func boolean(_ setting: ServerConfiguration.Setting) throws(ConfigurationError) -> Bool? {
        guard let text = string(setting) else { return nil }
        switch text.trimmingCharacters(in: .whitespaces).lowercased() {
        case "true", "1", "yes", "on": return true
        case "false", "0", "no", "off": return false
        default: throw ConfigurationError("\(setting.describe) must be true or false, got '\(text)'")
        }
    }

    /// The longest duration any setting takes: ten years. Longer ones, added to a clock reading
    /// in milliseconds or sent to PostgreSQL as an interval, would overflow.
    static let longestDuration: Int64 = 3650 * 86_400_000

    func milliseconds(_ setting: ServerConfiguration.Setting, atLeast least: Int64 = 0) throws(ConfigurationError) -> Int64? {
        guard let text = string(setting) else { return nil }
        guard let value = DurationText.milliseconds(text), value <= Self.longestDuration else {
            throw ConfigurationError("\(setting.describe) must be a duration like 45s, 90m, 12h or 30d (at most 3650d), got '\(text.prefix(64))'")
        }
        // Only a bare number (seconds) is held to the floor: `20s` says what it means.
        guard value >= least || text.trimmingCharacters(in: .whitespaces).contains(where: \.isLetter) else {
            let floor = least % 3_600_000 == 0 ? "\(least / 3_600_000)h" : least % 60_000 == 0 ? "\(least / 60_000)m" : "\(least)ms"
            throw ConfigurationError("\(setting.describe) must be at least \(floor), got '\(text.prefix(64))' (a number without a unit is seconds)")
        }
        return value
    }
}
