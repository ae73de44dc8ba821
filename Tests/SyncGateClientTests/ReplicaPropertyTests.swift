import Testing

@testable import SyncGateClient

/// Random histories of one device against a model server: whatever the device writes, loses
/// answers to, re-sends and pulls, (1) every write shows at once in its view, (2) no operation
/// reaches the server on a wrong base version — with one device there is nothing to conflict
/// with, so a stale base would be the client's own mistake — and (3) once everything is pushed
/// and pulled, the view equals the server's state.
@Suite("Replica properties", .timeLimit(.minutes(10)))
struct ReplicaPropertyTests {
    /// The server's rules for one device (no concurrent writers): versions, tombstones that win,
    /// idempotency keys remembered with the version they reached.
    struct ModelServer {
        var documents: [EntityKey: (version: Int64, data: JSONObject?)] = [:]
        var seen: [String: Int64] = [:]
        var wrongBases: [String] = []

        mutating func apply(_ entry: OutboxEntry) -> OperationResult {
            let key = entry.key
            func answer(_ status: OperationResult.Status, _ version: Int64?, serverData: JSONObject? = nil) -> OperationResult {
                OperationResult(idempotencyKey: entry.idempotencyKey, entityType: key.entityType, entityID: key.entityID, status: status, version: version, serverData: serverData)
            }
            if let version = seen[entry.idempotencyKey] { return answer(.duplicate, version) }
            guard let current = documents[key] else {
                guard entry.intent == .create, entry.baseVersion == 0 else {
                    wrongBases.append("\(entry.intent) of absent \(key) at base \(entry.baseVersion)")
                    return answer(.rejected(errorCode: "ENTITY_NOT_FOUND", message: "", retryable: false), nil)
                }
                documents[key] = (1, entry.data ?? [:])
                seen[entry.idempotencyKey] = 1
                return answer(.applied, 1)
            }
            if current.data == nil {
                seen[entry.idempotencyKey] = current.version
                return answer(.conflict(.serverWins), current.version, serverData: nil)
            }
            guard entry.baseVersion == current.version else {
                wrongBases.append("\(entry.intent) of \(key) at base \(entry.baseVersion), server at \(current.version)")
                return answer(.rejected(errorCode: "VALIDATION_ERROR", message: "", retryable: false), nil)
            }
            let next: JSONObject?
            switch entry.intent {
            case .create: next = entry.data ?? [:]
            case .update: next = (current.data ?? [:]).patched(with: entry.data ?? [:])
            case .delete: next = nil
            }
            documents[key] = (current.version + 1, next)
            seen[entry.idempotencyKey] = current.version + 1
            return answer(.applied, current.version + 1)
        }

        /// The latest change of every entity, as a pull from the beginning delivers it.
        var feed: [PulledChange] {
            documents.map { PulledChange(key: $0.key, data: $0.value.data, version: $0.value.version) }
        }
    }

    static let keys: [EntityKey] = [.milk, .eggs, .weight]

    static func randomDocument(_ random: inout SplitMix64) -> JSONObject {
        var document: JSONObject = [:]
        for field in ["a", "b", "c"] where Bool.random(using: &random) {
            document[field] = .int(Int64.random(in: 0..<3, using: &random))
        }
        return document
    }

    @Test("one device converges with the server, never on a wrong base", arguments: 0..<300)
    func singleDevice(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        var slice = ReplicaSlice()
        var server = ModelServer()
        var epoch: Int64 = 1
        var sequence: Int64 = 0
        var keyCount = 0
        let limits = OutboxBatcher.Limits(operations: Int.random(in: 1...4, using: &random), bytes: 1 << 20)

        func push(loseAnswer: Bool) {
            guard case .push(let batch) = OutboxBatcher.next(slice.outbox, limits: limits) else { return }
            markSent(batch.map(\.idempotencyKey), in: &slice)
            let results = batch.map { server.apply($0) }
            if !loseAnswer {
                _ = slice.settle(batch: batch.map(\.idempotencyKey), results: results, pullEpoch: epoch)
            }
        }
        func pull() {
            epoch += 1
            slice.apply(server.feed)
            slice.dropAcknowledged(before: epoch, watermark: .max)
            slice.tidy()
        }

        for _ in 0..<40 {
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<6:
                let key = Self.keys.randomElement(using: &random)!
                let before = slice.view(of: key).data
                let change: LocalChange
                switch Int.random(in: 0..<4, using: &random) {
                case 0: change = .delete
                case 1 where before != nil: change = .patch(Self.randomDocument(&random).merging(["b": nil]) { new, _ in new })
                default: change = .put(Self.randomDocument(&random))
                }
                sequence += 1
                _ = try slice.record(change, on: key, at: sequence, sequence: sequence) {
                    keyCount += 1
                    return "k\(keyCount)"
                }
                let expected: JSONObject?
                switch change {
                case .put(let document): expected = document
                case .patch(let fields): expected = before!.patched(with: fields)
                case .delete: expected = nil
                }
                #expect(slice.view(of: key).data == expected, "seed \(seed): a write must show at once")
            case 6, 7:
                push(loseAnswer: Int.random(in: 0..<4, using: &random) == 0)
            default:
                pull()
            }
        }
        var rounds = 0
        while slice.outbox.contains(where: { !$0.isAcknowledged }), rounds < 100 {
            push(loseAnswer: false)
            rounds += 1
        }
        pull()
        #expect(server.wrongBases.isEmpty, "seed \(seed): \(server.wrongBases)")
        #expect(slice.outbox.isEmpty, "seed \(seed): \(slice.outbox)")
        for key in Self.keys {
            #expect(slice.view(of: key).data == server.documents[key]?.data ?? nil, "seed \(seed) \(key)")
        }
    }
}
