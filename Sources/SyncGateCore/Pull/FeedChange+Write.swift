extension FeedChange {
    /// Appends ``json`` as ``JSONValue/serialized()`` would write it, the document as its
    /// checked text rather than a tree built and written again (a pull page's largest cost).
    public func write(to output: inout [UInt8]) {
        func append(_ literal: StaticString) {
            output.append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
        }
        // Keys in sorted order, as the tree is written.
        append(#"{"data":"#)
        if let document { output.append(contentsOf: document.bytes) } else { append("null") }
        append(#","entity_id":"#)
        JSONValue.writeString(entityID, to: &output)
        append(#","entity_type":"#)
        JSONValue.writeString(entityType, to: &output)
        append(#","household_id":"#)
        if let household = scope.householdID { JSONValue.writeString(household, to: &output) } else { append("null") }
        append(document == nil ? #","operation":"delete""# : #","operation":"upsert""#)
        append(#","updated_at":"#)
        JSONValue.writeString(updatedAt.rfc3339, to: &output)
        append(#","version":"#)
        output.append(contentsOf: String(version).utf8)
        append("}")
    }
}
