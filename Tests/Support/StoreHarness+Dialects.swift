package import SyncGateDialects
import SyncGateStorage

extension StoreHarness {
    /// The seed dialects' reads over this harness's driver.
    package var dialects: DialectStore {
        get throws {
            guard let driver = store.driver as? any DialectDriver else {
                throw TestEnvironmentError(description: "\(type(of: store.driver)) has no reads by commit time (DialectDriver)")
            }
            return DialectStore(driver: driver)
        }
    }
}
