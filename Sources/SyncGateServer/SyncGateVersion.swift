/// This release's version: `syncgate --version`, the start-up log line, CHANGELOG.md's newest entry.
package enum SyncGateVersion {
    package static let current = "0.3.0"
}
