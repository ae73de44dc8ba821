import SyncGateWire
/// A household and its memberships, as the apply step checks permissions against them.
package struct HouseholdState: Sendable, Hashable {
    package enum Role: String, Sendable, Hashable, CaseIterable {
        case owner, member
    }

    package var id: String
    package var ownerID: String
    package var archived: Bool = false
    /// By user id, compared by bytes.
    package var members: [ExactKey: Role] = [:]

    /// The role of `userID`, if a member.
    package func role(of userID: String) -> Role? {
        members[ExactKey(userID)]
    }

    /// Whether `userID` owns the household (ids compare by bytes).
    package func isOwned(by userID: String) -> Bool {
        ownerID.sameBytes(as: userID)
    }

    /// Whether `userID` may read and write this household's data.
    package func isActiveMember(_ userID: String) -> Bool {
        !archived && role(of: userID) != nil
    }
}

/// Ids of the built-in household entities.
package enum HouseholdIDs {
    /// `household_members` ids are `<household_id>:<user_id>`.
    package static func membershipID(household: String, user: String) -> String {
        household + ":" + user
    }

    /// The `household_members` entity of `user` in `household`.
    package static func membershipKey(household: String, user: String) -> EntityKey {
        EntityKey(scope: .household(household), entityType: "household_members", entityID: membershipID(household: household, user: user))
    }

    /// Splits a membership id; with a known household id, the rest is the user id.
    package static func splitMembershipID(_ id: String, household: String?) -> (household: String, user: String)? {
        if let household {
            // By bytes: String's hasPrefix would take another spelling of the household's id.
            let prefix = household.utf8.count + 1
            guard id.utf8.count > prefix, id.utf8.starts(with: household.utf8), id.utf8.dropFirst(prefix - 1).first == UInt8(ascii: ":") else {
                return nil
            }
            return (household, String(decoding: id.utf8.dropFirst(prefix), as: UTF8.self))
        }
        // At the first ':' byte (household ids hold none): a ':' followed by a combining mark is
        // one Character, which `firstIndex(of: ":")` would pass over.
        guard let colon = id.utf8.firstIndex(of: UInt8(ascii: ":")) else { return nil }
        let household = String(decoding: id.utf8[..<colon], as: UTF8.self)
        let user = String(decoding: id.utf8[id.utf8.index(after: colon)...], as: UTF8.self)
        guard !household.isEmpty, !user.isEmpty else { return nil }
        return (household, user)
    }
}

/// One row of a household joined with one of its members (`nil` for a household without any):
/// what drivers read, folded into ``HouseholdState`` values by ``HouseholdState/fold(_:)``.
package struct HouseholdRow: Sendable, Hashable {
    package var householdID: String
    package var ownerID: String
    package var archived: Bool
    package var memberID: String?
    package var role: String?

    package init(householdID: String, ownerID: String, archived: Bool, memberID: String?, role: String?) {
        self.householdID = householdID
        self.ownerID = ownerID
        self.archived = archived
        self.memberID = memberID
        self.role = role
    }
}

extension HouseholdState {
    /// Households from their joined rows, by `.household(id)` (ids compare by bytes).
    package static func fold(_ rows: some Sequence<HouseholdRow>) -> [Scope: HouseholdState] {
        var households: [Scope: HouseholdState] = [:]
        for row in rows {
            let scope = Scope.household(row.householdID)
            var household = households[scope] ?? HouseholdState(id: row.householdID, ownerID: row.ownerID, archived: row.archived)
            if let member = row.memberID, let role = row.role.flatMap(Role.init(rawValue:)) { household.members[ExactKey(member)] = role }
            households[scope] = household
        }
        return households
    }
}
