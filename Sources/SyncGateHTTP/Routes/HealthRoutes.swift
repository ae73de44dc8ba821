import Hummingbird
import SyncGateCore
import SyncGateWire
import SyncGateStorage

/// `GET /healthz` (the process is up) and `GET /readyz` (the database answers and this release can
/// use its schema: current, or ahead by migrations that do not break it).
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
        if let problem = status.problem {
            throw ProtocolError(.unavailable, problem, retryAfterSeconds: retryAfterSeconds)
        }
        return .json(["status": "ready", "database": .string(store.driverName), "schema_version": .int(Int64(status.applied))])
    }
}
