/// The device id rule of the wire (`X-Device-Id`, the SDK's device): 1–128 characters of
/// `A-Za-z0-9._:-`; ids starting with `service:` name the writes of service keys, never a device.
public enum DeviceID {
    public static let maximumLength = 128
    public static let reservedPrefix = "service:"

    /// 1–128 characters of `A-Za-z0-9._:-`.
    public static func isWellFormed(_ value: String) -> Bool {
        guard (1...maximumLength).contains(value.utf8.count) else { return false }
        return value.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: ":"), UInt8(ascii: "-"):
                return true
            default:
                return false
            }
        }
    }

    /// The device of the jobs an erase queues to take a user out of their households: the
    /// erase finds its own jobs by it, so no device may use it.
    public static let eraseDevice = "syncgate-erase"

    /// Whether `value` is reserved for service keys (`service:<name>`): no device may use it.
    public static func isReserved(_ value: String) -> Bool {
        value.utf8.starts(with: reservedPrefix.utf8)
    }

    /// Why `value` cannot be a device's id, or `nil` when it can.
    public static func problem(with value: String, field: String) -> String? {
        if !isWellFormed(value) { return "\(field) must be 1 to \(maximumLength) characters of A-Z a-z 0-9 . _ : -" }
        if value.utf8.elementsEqual(eraseDevice.utf8) { return "\(field) '\(eraseDevice)' is reserved for the server's erase jobs" }
        if isReserved(value) { return "\(field) must not start with '\(reservedPrefix)' (reserved for service keys)" }
        return nil
    }
}
