import Foundation

/// A fresh folder under the system's temporary directory, for a test's SQLite files.
func temporaryFolder(_ label: String = "client") throws -> String {
    let folder = NSTemporaryDirectory() + "syncgate-\(label)-\(UUID().uuidString.prefix(12))"
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    return folder
}
