import HTTPTypes
package import Hummingbird
import Synchronization
import SyncGateWebhooks
package import SyncGateWire

/// A change webhook receiver for tests, on 127.0.0.1 (``withTestHTTPServer(_:_:)``): it checks
/// what a real one checks (the Standard Webhooks headers and signature), records every request,
/// and answers 500 to the first `failing` ones.
package final class WebhookReceiver: Sendable {
    package struct Delivery: Sendable {
        package var id: String
        package var body: [UInt8]
        package var signatureValid: Bool
        package var status: Int
        package var changes: [JSONValue]
        /// `u:<user>` or `h:<household>`.
        package var scope: String
    }

    private let state: Mutex<(secret: String?, deliveries: [Delivery], failing: Int)>

    /// `secret`: the subscription's, or `nil` until ``expect(secret:)`` (a subscription made
    /// after the receiver listens).
    package init(secret: String?, failing: Int = 0) {
        state = Mutex((secret, [], failing))
    }

    package func expect(secret: String) {
        state.withLock { $0.secret = secret }
    }

    package var deliveries: [Delivery] { state.withLock { $0.deliveries } }

    /// Changes of the requests answered 2xx, each request once (deduplicated by webhook-id), in
    /// the order they arrived.
    package var accepted: [(scope: String, change: JSONValue)] {
        var seen: Set<String> = []
        return deliveries.filter { $0.status == 200 && seen.insert($0.id).inserted }.flatMap { delivery in
            delivery.changes.map { (delivery.scope, $0) }
        }
    }

    package var router: Router<BasicRequestContext> {
        let router = Router()
        router.post("hook") { request, _ -> HTTPResponse.Status in
            let body = Array(try await request.body.collect(upTo: 1 << 22).readableBytesView)
            let id = request.headers[HTTPField.Name("webhook-id")!] ?? ""
            let timestamp = Int64(request.headers[HTTPField.Name("webhook-timestamp")!] ?? "") ?? 0
            let signature = request.headers[HTTPField.Name("webhook-signature")!] ?? ""
            let json = try? JSONParser().parse(body)
            let data = json?["data"]
            let scope = data?["user_id"]?.stringValue.map { "u:" + $0 } ?? data?["household_id"]?.stringValue.map { "h:" + $0 } ?? "?"
            return self.state.withLock { state in
                let key = state.secret.flatMap(WebhookSignature.key(of:))
                let valid = key.map { WebhookSignature.verify(id: id, timestamp: timestamp, body: body, header: signature, key: $0) } ?? false
                let status = state.failing > 0 ? 500 : 200
                if state.failing > 0 { state.failing -= 1 }
                state.deliveries.append(
                    Delivery(id: id, body: body, signatureValid: valid, status: status, changes: data?["changes"]?.arrayValue ?? [], scope: scope)
                )
                return status == 200 ? .ok : .internalServerError
            }
        }
        return router
    }
}
