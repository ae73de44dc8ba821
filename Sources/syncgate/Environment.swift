import ArgumentParser
import Foundation
import SyncGateCore

/// `SYNCGATE_*` environment fallbacks for settings not given on the command line.
enum Environment {
    static func string(_ name: String) -> String? {
        guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else { return nil }
        return value
    }

    static func integer(_ name: String) throws -> Int? {
        guard let text = string(name) else { return nil }
        guard let value = Int(text) else { throw ValidationError("\(name) must be an integer, got '\(text)'") }
        return value
    }

    static func duration(_ name: String) throws -> Int64? {
        try string(name).map { try milliseconds($0, setting: name) }
    }

    /// Parses `500ms`, `45s`, `90m`, `12h`, `30d` or plain seconds.
    static func milliseconds(_ text: String, setting: String) throws -> Int64 {
        guard let value = DurationText.milliseconds(text) else {
            throw ValidationError("\(setting) must be a duration like 45s, 90m, 12h or 30d, got '\(text)'")
        }
        return value
    }
}
