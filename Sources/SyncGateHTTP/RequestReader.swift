package import HTTPTypes
package import Hummingbird
import SyncGateCore
package import SyncGateWire

/// Reads and checks the parts of a request the protocol constrains.
package struct RequestReader {
    let request: Request

    package init(request: Request) {
        self.request = request
    }

    /// `X-Device-Id`: 1–128 characters of `A-Za-z0-9._:-`.
    package func deviceID() throws(ProtocolError) -> String {
        guard let value = request.headers[Self.deviceIDField] else {
            throw ProtocolError(.validationError, "missing X-Device-Id header")
        }
        // What a service key writes comes from `service:<name>`; no device can claim to be one.
        if let problem = DeviceID.problem(with: value, field: "X-Device-Id") { throw ProtocolError(.validationError, problem) }
        return value
    }

    package static let deviceIDField = HTTPField.Name("X-Device-Id")!

    /// `entity_types`: a comma-separated list of 1 to 100 type names; `nil` when absent (every type).
    static func entityTypes(_ parameters: [String: String]) throws(ProtocolError) -> Set<String>? {
        guard let list = parameters["entity_types"] else { return nil }
        let names = list.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        // As a push's entity_type: its length in code points, no control characters (PostgreSQL
        // refuses a NUL in text, which would be a 500 rather than this 400).
        guard !names.isEmpty, names.count <= 100, names.allSatisfy({ IdentifierLimits.isValid($0, length: 1...IdentifierLimits.entityType) }) else {
            throw ProtocolError(.validationError, "'entity_types' must be a comma-separated list of 1 to 100 type names")
        }
        return Set(names)
    }

    /// The query parameters, refusing any not in `allowed` and any given twice.
    func query(allowed: Set<String>) throws(ProtocolError) -> [String: String] {
        var parameters: [String: String] = [:]
        for (key, value) in request.uri.queryParameters {
            let name = String(key)
            guard allowed.contains(name) else {
                let known = allowed.sorted().joined(separator: ", ")
                throw ProtocolError(.validationError, "unknown query parameter '\(name.prefix(64))'" + (known.isEmpty ? "" : " (known: \(known))"))
            }
            guard parameters[name] == nil else {
                throw ProtocolError(.validationError, "query parameter '\(name)' is given twice")
            }
            parameters[name] = String(value)
        }
        return parameters
    }

    /// An integer query parameter within `range`, or `defaultValue` when absent.
    package static func integer(_ parameters: [String: String], _ name: String, in range: ClosedRange<Int>, default defaultValue: Int) throws(ProtocolError) -> Int {
        guard let text = parameters[name] else { return defaultValue }
        guard text.utf8.count <= 12, let value = Int(text), range.contains(value) else {
            throw ProtocolError(.validationError, "'\(name)' must be an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }
}
