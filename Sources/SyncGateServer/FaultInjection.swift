import Foundation
package import SyncGateStorage

extension StoreHooks {
    /// The environment variable process tests set to hold every apply (see ``holdingEachApply(in:)``).
    package static let holdApplyVariable = "SYNCGATE_TEST_HOLD_APPLY"

    /// A fault-injection seam for process tests, off unless `SYNCGATE_TEST_HOLD_APPLY` names a
    /// folder: each apply, inside its transaction (entities and feed changes written, idempotency
    /// records and result not yet, nothing committed), creates `held-<job id>` there and waits
    /// until a file `release` appears, so a test can kill the process at a moment it knows is mid-job.
    package static func holdingEachApply(in folder: String) -> StoreHooks {
        StoreHooks(midApply: { job, _ in
            FileManager.default.createFile(atPath: "\(folder)/held-\(job.id)", contents: nil)
            let release = "\(folder)/release"
            while !FileManager.default.fileExists(atPath: release) {
                try await Task.sleep(for: .milliseconds(10))
            }
        })
    }

    /// ``holdingEachApply(in:)`` when the environment asks for it, else no hooks.
    package static var fromTestEnvironment: StoreHooks {
        guard let folder = ProcessInfo.processInfo.environment[holdApplyVariable], !folder.isEmpty else { return StoreHooks() }
        return holdingEachApply(in: folder)
    }
}
