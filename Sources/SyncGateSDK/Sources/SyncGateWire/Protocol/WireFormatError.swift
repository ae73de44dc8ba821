/// JSON that does not have the protocol's shape: a field missing or of the wrong kind.
public struct WireFormatError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was wrong, e.g. "a result without idempotency_key".
    public var description: String

    public init(_ description: String) {
        self.description = description
    }
}
