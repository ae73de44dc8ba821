package import ArgumentParser
import Foundation
import Configuration
package import Logging
import Metrics
import OTel
import Prometheus
package import ServiceLifecycle
import SyncGateCore
import SyncGateWire
package import SyncGateServer
import SyncGateStorage

/// Options every command that touches the database takes. Each option is also a setting of the
/// layered configuration (flag > `SYNCGATE_*` environment > `--config` file > default).
package struct CommonOptions: ParsableArguments {
    package init() {}

    @Option(name: .customLong("database-url"), help: "postgres://user[:pass]@host:port/db or sqlite:PATH (env SYNCGATE_DATABASE_URL; default sqlite:./data/syncgate.sqlite)")
    package var databaseURL: String?

    @Option(name: .customLong("config"), help: "A YAML file of settings (keys as in the README, e.g. queueLimitPerUser: 50; env SYNCGATE_CONFIG)")
    package var configFile: String?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical (env SYNCGATE_LOG_LEVEL; default info)")
    package var logLevel: String?

    /// These options as command-line arguments again (for a child process).
    package var arguments: [String] {
        [("--database-url", databaseURL), ("--config", configFile), ("--log-level", logLevel)].flatMap { flag, value in value.map { [flag, $0] } ?? [] }
    }

    /// The configuration with these options and `extra` flags on top of environment and file.
    package func configuration(_ extra: [ServerConfiguration.Setting: String] = [:]) async throws -> (ServerConfiguration, Logger) {
        var flags = extra
        if let databaseURL { flags[.databaseURL] = databaseURL }
        if let logLevel { flags[.logLevel] = logLevel }
        // The log level first, so that reading every other setting can be logged (at debug, secrets redacted).
        let levelName = try await ServerConfiguration.reader(flags: flags, configFile: configFile).string(forKey: "logLevel") ?? "info"
        guard let level = Logger.Level(rawValue: levelName) else {
            throw ValidationError("unknown log level '\(levelName)' (--log-level, SYNCGATE_LOG_LEVEL)")
        }
        let formatName = try await ServerConfiguration.reader(flags: flags, configFile: configFile).string(forKey: "logFormat") ?? "text"
        guard let format = ServerConfiguration.LogFormat(rawValue: formatName) else {
            throw ValidationError("unknown log format '\(formatName)' (SYNCGATE_LOG_FORMAT: text or json)")
        }
        let logger = LoggingBootstrap.logger(level: level, format: format)
        let reader = try await ServerConfiguration.reader(flags: flags, configFile: configFile, accessLogger: logger)
        do {
            var configuration = try ServerConfiguration(reader: reader)
            configuration.storeHooks = .fromTestEnvironment
            return (configuration, logger)
        } catch {
            throw ValidationError(error.message)
        }
    }
}

package enum LoggingBootstrap {
    private static let done = NSLock()
    nonisolated(unsafe) private static var bootstrapped = false

    /// Bootstraps the process's logging (text or JSON lines on standard error) and metrics
    /// (Prometheus, served at `/metrics`) once, and returns a logger.
    package static func logger(level: Logger.Level, format: ServerConfiguration.LogFormat = .text, label: String = "syncgate") -> Logger {
        done.lock()
        if !bootstrapped {
            bootstrapped = true
            switch format {
            case .text:
                LoggingSystem.bootstrap({ label, provider in
                    var handler = StreamLogHandler.standardError(label: label, metadataProvider: provider)
                    handler.logLevel = level
                    return handler
                }, metadataProvider: .traceIDs)
            case .json:
                LoggingSystem.bootstrap({ label, provider in
                    var handler = JSONLogHandler(label: label, metadataProvider: provider)
                    handler.logLevel = level
                    return handler
                }, metadataProvider: .traceIDs)
            }
            MetricsSystem.bootstrap(PrometheusMetricsFactory())
        }
        done.unlock()
        var logger = Logger(label: label)
        logger.logLevel = level
        return logger
    }
}

package struct CollectionsOption: ParsableArguments {
    package init() {}

    @Option(name: .customLong("collections"), help: "Entity types YAML file (env SYNCGATE_COLLECTIONS; default: the built-in types)")
    package var collectionsFile: String?

    package var flags: [ServerConfiguration.Setting: String] {
        collectionsFile.map { [.collections: $0] } ?? [:]
    }
}

package enum TracingBootstrap {
    /// When `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces-specific variable) is set, bootstraps
    /// swift-otel's tracer with the OTLP/HTTP exporter and returns its exporting service, which
    /// the process runs beside its own; otherwise tracing stays the free no-op. The standard
    /// `OTEL_*` variables (service name, sampler, headers…) apply.
    package static func service(logger: Logger) throws -> (any Service)? {
        let environment = ProcessInfo.processInfo.environment
        guard environment["OTEL_EXPORTER_OTLP_ENDPOINT"] != nil || environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] != nil else { return nil }
        var configuration = OTel.Configuration.default
        configuration.serviceName = "syncgate"
        // Its own messages in SyncGate's log format, at warning and above.
        var diagnostics = logger
        diagnostics.logLevel = max(logger.logLevel, .warning)
        configuration.diagnosticLogger = .custom(diagnostics)
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.otlpExporter.protocol = .httpProtobuf
        let service = try OTel.bootstrap(configuration: configuration)
        logger.info("tracing: exporting spans over OTLP/HTTP")
        return service
    }
}
