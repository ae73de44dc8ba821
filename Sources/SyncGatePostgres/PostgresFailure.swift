import Foundation
import PostgresNIO
import SyncGateCore
import SyncGateWire

/// A PostgreSQL error as SyncGate logs and records it: the operation, the SQLSTATE and the
/// server's message — never the values bound to the statement or the server's DETAIL.
///
/// `PSQLError`'s debug description prints every bind (documents, ids, tokens' subjects) and the
/// DETAIL quotes row values; its plain description says nothing at all. Logs, `500` answers and
/// the `last_error` of dead jobs need the cause without the data, so the driver converts every
/// `PSQLError` it passes on into this.
package struct PostgresFailure: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible, ClassifiedFailure {
    package var operation: String
    /// The SQLSTATE (e.g. `22P02`), or the client-side error code when the server sent none.
    package var code: String
    /// The server's message, cut before a `: ` that introduces a value (e.g. `invalid input
    /// syntax for type integer: "…"`).
    package var message: String

    package var description: String {
        message.isEmpty ? "\(operation) failed: \(code)" : "\(operation) failed: \(code) \(message)"
    }

    package var debugDescription: String { description }

    /// Classes retrying cannot fix: 22 (data exception: a value out of range, invalid text for a
    /// type) and 54 (program limit exceeded: a value too large to store). Integrity violations
    /// (23) may come from a race a retry resolves; the rest (connections, locks, resources,
    /// shutdown) are transient.
    package var isPermanent: Bool { code.hasPrefix("22") || code.hasPrefix("54") }

    package var clientReason: String { message.isEmpty ? "SQLSTATE \(code)" : "SQLSTATE \(code): \(message)" }
}

extension PostgresFailure {
    /// The failure a `PSQLError` reports, without the row values it quotes.
    init(operation: String, _ error: PSQLError) {
        self.operation = operation
        if let info = error.serverInfo {
            code = info[.sqlState] ?? "?"
            let full = info[.message] ?? ""
            message = full.range(of: ": ").map { String(full[..<$0.lowerBound]) } ?? full
        } else {
            code = "\(error.code)"
            message = ""
        }
    }
}
