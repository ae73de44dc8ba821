import Hummingbird
import SyncGateCore
import SyncGateStorage

/// `GET /healthz` (the process is up) and `GET /readyz` (the database answers and its schema is current).
struct HealthRoutes: Sendable {
    let store: any FrontStore
    let retryAfterSeconds: Int

    func health(_ request: Request, context: some RequestContext) async throws -> Response {
        .json(["status": "ok"])
    }

    func ready(_ request: Request, context: some RequestContext) async throws -> Response {
        let status: SchemaStatus
        do {
            status = try await store.schemaStatus()
        } catch {
            throw ProtocolError(.unavailable, "the database is unreachable", retryAfterSeconds: retryAfterSeconds)
        }
        guard status.isCurrent else {
            throw ProtocolError(
                .unavailable,
                "the database schema is at version \(status.applied), this server needs \(status.latest): run `syncgate migrate`",
                retryAfterSeconds: retryAfterSeconds
            )
        }
        return .json(["status": "ready", "database": .string(store.driverName), "schema_version": .int(Int64(status.applied))])
    }
}
