package import GRDB
import SyncGateCore
import SyncGateWire

/// SQLite's errors retrying cannot fix, the counterpart of PostgreSQL's classes 22 and 54: a
/// value too big, of the wrong type, or refused by a CHECK constraint or a trigger. Busy, locked
/// and I/O errors are transient.
extension DatabaseError: ClassifiedFailure {
    package var isPermanent: Bool {
        switch extendedResultCode {
        case .SQLITE_TOOBIG, .SQLITE_MISMATCH, .SQLITE_CONSTRAINT_CHECK, .SQLITE_CONSTRAINT_TRIGGER: true
        default: false
        }
    }

    package var clientReason: String { "SQLite: \(message ?? "\(extendedResultCode)")" }
}
