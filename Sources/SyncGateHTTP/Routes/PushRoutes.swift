import Hummingbird
import Logging
import SyncGateCore
import SyncGateStorage
import SyncGateWire

/// `/v1/devices/current/push`: the calling device's push address, where silent `sync_nudge`
/// pushes reach it in the background (docs/push.md). The user's token and `X-Device-Id` name
/// the device, as for push and pull.
///
/// - `PUT` `{"provider": "apns", "token", "topic", "environment"}` or `{"provider": "fcm", "token"}`:
///   200 with the registration; replaces the device's previous one.
/// - `GET`: 200 with the registration, 404 when the device has none.
/// - `DELETE`: 204, whether or not it had one.
struct PushRoutes: Sendable {
    let sync: SyncRoutes

    func add(to group: RouterGroup<SyncRequestContext>) {
        group.put("devices/current/push", use: register)
        group.get("devices/current/push", use: show)
        group.delete("devices/current/push", use: unregister)
    }

    func device(_ request: Request, context: SyncRequestContext) throws -> DeviceKey {
        let reader = RequestReader(request: request)
        let device = DeviceKey(userID: try context.userID(), deviceID: try reader.deviceID())
        _ = try reader.query(allowed: [])
        return device
    }

    func register(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let device = try device(request, context: context)
        let bytes = try await sync.readBody(request)
        guard let json = try? JSONParser().parse(Array(bytes.readableBytesView)) else {
            throw ProtocolError(.validationError, "the body must be a JSON object")
        }
        let registration: PushRegistration
        do {
            registration = try PushRegistration(json: json)
        } catch {
            throw ProtocolError(.validationError, error.description)
        }
        try await sync.store.registerPush(device, registration)
        context.logger.debug("push registered", metadata: ["syncgate.push.provider": "\(registration.provider.rawValue)"])
        return try await show(request, context: context)
    }

    func show(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let device = try device(request, context: context)
        guard let stored = try await sync.store.pushRegistration(device) else {
            throw ProtocolError(.notFound, "this device has no push registration")
        }
        return .json(stored.json)
    }

    func unregister(_ request: Request, context: SyncRequestContext) async throws -> Response {
        let device = try device(request, context: context)
        _ = try await sync.store.unregisterPush(device)
        return Response(status: .noContent)
    }
}
