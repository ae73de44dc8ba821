import SyncGateWire
extension SyncClient {
    /// Creates a household with the user as its owner (type `households`).
    @discardableResult
    public func createHousehold(_ id: String, name: String) async throws -> LocalWrite {
        try await write(type: "households", id: id, data: ["name": .string(name)])
    }

    /// Adds a user to a household (owner only; type `household_members`).
    @discardableResult
    public func addMember(_ userID: String, to household: String) async throws -> LocalWrite {
        try await write(type: "household_members", id: "\(household):\(userID)", data: ["user_id": .string(userID), "role": "member"])
    }

    /// Removes a user from a household: the owner removing a member, or a member leaving.
    @discardableResult
    public func removeMember(_ userID: String, from household: String) async throws -> LocalWrite {
        try await delete(type: "household_members", id: "\(household):\(userID)")
    }
}
