import Foundation
import Synchronization

/// A fresh folder under the system's temporary directory, for a test's SQLite files; removed
/// when the test process exits (a suite's stores outlive the test that made them).
func temporaryFolder(_ label: String = "client") throws -> String {
    let folder = NSTemporaryDirectory() + "syncgate-\(label)-\(UUID().uuidString.prefix(12))"
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    TemporaryFolders.shared.remember(folder)
    return folder
}

/// The folders to remove at exit.
final class TemporaryFolders: Sendable {
    static let shared: TemporaryFolders = {
        atexit { TemporaryFolders.shared.removeAll() }
        return TemporaryFolders()
    }()

    private let folders = Mutex<[String]>([])

    func remember(_ folder: String) { folders.withLock { $0.append(folder) } }

    func removeAll() {
        for folder in folders.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: folder) }
    }
}
