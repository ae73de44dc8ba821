// An app names the wire's types (JSONValue, JSONObject, Timestamp, OperationResult) through this
// module: they are the SDK's API as much as its own types, and an app imports one module.
@_exported public import SyncGateWire
