import ArgumentParser
import Foundation
import Logging
import SyncGateCore
import SyncGateStorage

struct DatabaseOptions: ParsableArguments {
    @Option(
        name: .customLong("database-url"),
        help: "postgres://user[:pass]@host:port/db or sqlite:PATH (env SYNCGATE_DATABASE_URL; default sqlite:./data/syncgate.sqlite)"
    )
    var databaseURL: String?

    func resolved() throws -> DatabaseURL {
        guard let text = databaseURL ?? Environment.string("SYNCGATE_DATABASE_URL") else { return .defaultSQLite }
        do {
            return try DatabaseURL(parsing: text)
        } catch {
            throw ValidationError("database URL: \(error)")
        }
    }
}

struct LoggingOptions: ParsableArguments {
    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical (env SYNCGATE_LOG_LEVEL; default info)")
    var logLevel: String?

    func makeLogger(_ label: String = "syncgate") throws -> Logger {
        let text = logLevel ?? Environment.string("SYNCGATE_LOG_LEVEL") ?? "info"
        guard let level = Logger.Level(rawValue: text) else { throw ValidationError("unknown log level '\(text)'") }
        LoggingBootstrap.once(level: level)
        var logger = Logger(label: label)
        logger.logLevel = level
        return logger
    }
}

enum LoggingBootstrap {
    private static let done = NSLock()
    nonisolated(unsafe) private static var bootstrapped = false

    static func once(level: Logger.Level) {
        done.lock()
        defer { done.unlock() }
        guard !bootstrapped else { return }
        bootstrapped = true
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }
}

struct CollectionsOptions: ParsableArguments {
    @Option(name: .customLong("collections"), help: "Entity types YAML file (env SYNCGATE_COLLECTIONS; default: the built-in types)")
    var collectionsFile: String?

    func load() throws -> Collections {
        guard let path = collectionsFile ?? Environment.string("SYNCGATE_COLLECTIONS") else { return .default }
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw ValidationError("cannot read entity types file \(path): \(error.localizedDescription)")
        }
        do {
            return try Collections.parse(yaml: text, source: path)
        } catch {
            throw ValidationError(error.message)
        }
    }
}
