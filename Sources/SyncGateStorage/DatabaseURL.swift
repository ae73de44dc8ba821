/// Where the data lives: `postgres://user[:password]@host[:port]/database[?sslmode=…&sslrootcert=…]`
/// or `sqlite:PATH`.
package enum DatabaseURL: Sendable, Hashable, CustomStringConvertible {
    case postgres(PostgresLocation)
    case sqlite(path: String)

    package struct PostgresLocation: Sendable, Hashable {
        package var host: String
        package var port: Int = 5432
        package var user: String
        package var password: String?
        package var database: String
        /// As libpq's `sslmode`: `disable` (default), `prefer` and `require` (encrypted, the
        /// certificate not checked), `verify-ca` (signed by a trusted CA) or `verify-full` (and
        /// issued for the host).
        package var tlsMode: String = "disable"
        /// A PEM file of the CAs to trust (`?sslrootcert=/path`) instead of the system's.
        package var tlsRootCertificate: String?
        /// A directory holding the server's Unix socket (`?host=/path`), used instead of TCP.
        package var socketDirectory: String?

        // Spelled out: tests' support library builds locations, and a synthesized init is internal.
        package init(
            host: String, port: Int = 5432, user: String, password: String? = nil, database: String, tlsMode: String = "disable",
            tlsRootCertificate: String? = nil, socketDirectory: String? = nil
        ) {
            self.host = host
            self.port = port
            self.user = user
            self.password = password
            self.database = database
            self.tlsMode = tlsMode
            self.tlsRootCertificate = tlsRootCertificate
            self.socketDirectory = socketDirectory
        }

        package static let tlsModes = ["disable", "prefer", "require", "verify-ca", "verify-full"]
    }

    /// The embedded default.
    package static let defaultSQLite = DatabaseURL.sqlite(path: "./data/syncgate.sqlite")

    package init(parsing text: String) throws(DatabaseURLError) {
        if text.hasPrefix("sqlite:") {
            var path = String(text.dropFirst("sqlite:".count))
            if path.hasPrefix("//") { path.removeFirst(2) }  // also accept sqlite://PATH
            guard !path.isEmpty else { throw DatabaseURLError("sqlite: URL needs a file path, e.g. sqlite:./data/syncgate.sqlite") }
            self = .sqlite(path: path)
            return
        }
        let schemes = ["postgres://", "postgresql://"]
        guard let scheme = schemes.first(where: { text.hasPrefix($0) }) else {
            throw DatabaseURLError("unsupported database URL (expected postgres://user[:pass]@host:port/db or sqlite:PATH)")
        }
        var rest = Substring(text.dropFirst(scheme.count))
        var query: [String: String] = [:]
        if let questionMark = rest.firstIndex(of: "?") {
            for pair in rest[rest.index(after: questionMark)...].split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                query[String(parts[0])] = parts.count > 1 ? Self.percentDecode(parts[1]) : ""
            }
            rest = rest[..<questionMark]
        }
        guard let at = rest.lastIndex(of: "@") else {
            throw DatabaseURLError("database URL needs a user: postgres://user[:pass]@host:port/db")
        }
        let credentials = rest[..<at]
        let location = rest[rest.index(after: at)...]
        let userParts = credentials.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        let user = Self.percentDecode(userParts[0])
        let password = userParts.count > 1 ? Self.percentDecode(userParts[1]) : nil
        guard !user.isEmpty else { throw DatabaseURLError("database URL needs a user name") }

        let slash = location.firstIndex(of: "/")
        let hostPort = slash.map { location[..<$0] } ?? location
        let database = slash.map { Self.percentDecode(location[location.index(after: $0)...]) } ?? ""
        guard !database.isEmpty else { throw DatabaseURLError("database URL needs a database name: …/db") }
        var host = String(hostPort)
        var port = 5432
        if let colon = hostPort.lastIndex(of: ":"), !hostPort.hasSuffix("]") {
            host = String(hostPort[..<colon])
            guard let parsed = Int(hostPort[hostPort.index(after: colon)...]), (1...65535).contains(parsed) else {
                throw DatabaseURLError("database URL has an invalid port")
            }
            port = parsed
        }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let socketDirectory = query["host"].flatMap { $0.hasPrefix("/") ? $0 : nil }
        if host.isEmpty, socketDirectory == nil { host = "localhost" }
        let tlsMode = query["sslmode"] ?? "disable"
        guard PostgresLocation.tlsModes.contains(tlsMode) else {
            throw DatabaseURLError("sslmode must be one of \(PostgresLocation.tlsModes.joined(separator: ", "))")
        }
        self = .postgres(PostgresLocation(
            host: host, port: port, user: user, password: password, database: database, tlsMode: tlsMode,
            tlsRootCertificate: query["sslrootcert"], socketDirectory: socketDirectory
        ))
    }

    /// The URL with any password masked, for logs.
    package var description: String {
        switch self {
        case .sqlite(let path): return "sqlite:\(path)"
        case .postgres(let location):
            let credentials = location.password == nil ? location.user : "\(location.user):***"
            let socket = location.socketDirectory.map { "?host=\($0)" } ?? ""
            return "postgres://\(credentials)@\(location.host):\(location.port)/\(location.database)\(socket)"
        }
    }

    static func percentDecode(_ text: Substring) -> String {
        var bytes: [UInt8] = []
        var index = text.utf8.startIndex
        let utf8 = text.utf8
        while index < utf8.endIndex {
            let byte = utf8[index]
            if byte == UInt8(ascii: "%"),
                let high = utf8.index(index, offsetBy: 1, limitedBy: utf8.endIndex), high < utf8.endIndex,
                let low = utf8.index(index, offsetBy: 2, limitedBy: utf8.endIndex), low < utf8.endIndex,
                let value = UInt8(String(decoding: [utf8[high], utf8[low]], as: UTF8.self), radix: 16)
            {
                bytes.append(value)
                index = utf8.index(after: low)
            } else {
                bytes.append(byte)
                index = utf8.index(after: index)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

package struct DatabaseURLError: Error, Sendable, Equatable, CustomStringConvertible {
    package var message: String
    package init(_ message: String) { self.message = message }
    package var description: String { message }
}
