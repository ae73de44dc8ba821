extension Dictionary where Key == String, Value == JSONValue {
    /// This document with an update's patch applied: each top-level field of `patch` replaces
    /// the document's, and a `null` removes it. Server and client apply updates by this one rule.
    public func patched(with patch: JSONObject) -> JSONObject {
        var result = self
        for (field, value) in patch {
            if value.isNull {
                result.removeValue(forKey: field)
            } else {
                result[field] = value
            }
        }
        return result
    }

    /// The patch that turns this document into `new`: its changed and added fields, and `null`
    /// for those it removes.
    public func patch(to new: JSONObject) -> JSONObject {
        var patch: JSONObject = [:]
        for (field, value) in new where self[field] != value {
            patch[field] = value
        }
        for field in keys where new[field] == nil {
            patch[field] = .null
        }
        return patch
    }
}

extension JSONValue {
    /// Parses JSON text with ``JSONParser``'s defaults.
    public init(parsing bytes: some Collection<UInt8>) throws(JSONParseError) {
        self = try JSONParser().parse(bytes)
    }

    /// Parses JSON text with ``JSONParser``'s defaults.
    public init(parsing text: String) throws(JSONParseError) {
        self = try JSONParser().parse(text)
    }
}
