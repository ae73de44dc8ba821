/// Strings compared, hashed and ordered by their UTF-8 bytes, as PostgreSQL and SQLite compare
/// text. Swift's `==` compares canonical equivalence, under which NFC "é" and NFD "é" are one
/// string, though they are two rows in either database. The one implementation of the server's
/// keys and the SDK's alike (inlinable: they run on every key comparison).
public enum UTF8Bytes {
    /// Whether the two hold the same UTF-8 bytes.
    @inlinable
    public static func equal(_ a: String, _ b: String) -> Bool {
        let compared = a.utf8.withContiguousStorageIfAvailable { a in
            b.utf8.withContiguousStorageIfAvailable { b in a.count == b.count && a.elementsEqual(b) }
        }
        return (compared ?? nil) ?? a.utf8.elementsEqual(b.utf8)
    }

    /// Feeds the UTF-8 bytes and their count to `hasher`: equal exactly when ``equal(_:_:)`` is.
    @inlinable
    public static func hash(_ text: String, into hasher: inout Hasher) {
        hasher.combine(text.utf8.count)
        if text.utf8.withContiguousStorageIfAvailable({ hasher.combine(bytes: UnsafeRawBufferPointer($0)) }) == nil {
            for byte in text.utf8 { hasher.combine(byte) }
        }
    }
}
