@testable import SyncGateStorage
import Testing

/// `SYNCGATE_DATABASE_URL` as operators write it, libpq-style.
@Suite struct DatabaseURLTests {
    @Test func postgresURLsWithTheirParts() throws {
        let url = try DatabaseURL(parsing: "postgresql://sync:p%40ss@db.internal:6432/syncgate?sslmode=verify-full&sslrootcert=/etc/ssl/rds.pem")
        #expect(url == .postgres(.init(
            host: "db.internal", port: 6432, user: "sync", password: "p@ss", database: "syncgate", tlsMode: "verify-full",
            tlsRootCertificate: "/etc/ssl/rds.pem"
        )))
        #expect(url.description == "postgres://sync:***@db.internal:6432/syncgate", "the password never reaches a log")
        let socket = try DatabaseURL(parsing: "postgres://postgres@/syncgate?host=/var/run/postgresql")
        guard case .postgres(let location) = socket else { Issue.record("not postgres"); return }
        #expect(location.socketDirectory == "/var/run/postgresql" && location.port == 5432 && location.tlsMode == "disable")
    }

    @Test(arguments: DatabaseURL.PostgresLocation.tlsModes)
    func everyLibpqSslmodeIsAccepted(_ mode: String) throws {
        guard case .postgres(let location) = try DatabaseURL(parsing: "postgres://u@h/db?sslmode=\(mode)") else { Issue.record("not postgres"); return }
        #expect(location.tlsMode == mode)
    }

    @Test(arguments: [
        "postgres://u@h/db?sslmode=allow-ish", "mysql://u@h/db", "postgres://@h/db", "postgres://u@h/", "postgres://u@h:99999/db", "sqlite:",
    ])
    func badURLsAreRefusedWithAReason(_ text: String) {
        #expect(throws: DatabaseURLError.self) { try DatabaseURL(parsing: text) }
    }

    @Test func sqliteURLs() throws {
        #expect(try DatabaseURL(parsing: "sqlite:./data/x.sqlite") == .sqlite(path: "./data/x.sqlite"))
        #expect(try DatabaseURL(parsing: "sqlite:///tmp/x.sqlite") == .sqlite(path: "/tmp/x.sqlite"))
    }
}
