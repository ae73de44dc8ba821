package import SyncGateCore
package import SyncGateWire

/// One of a user's devices as an operator sees it (`GET /admin/v1/users/{id}`): a device that
/// pushed (its watermark) or registered for nudges, or both.
package struct DeviceRecord: Sendable, Hashable {
    package var deviceID: String
    /// The newest of its jobs that finished; `nil`: none yet.
    package var watermark: Int64?
    /// When its newest job finished.
    package var lastJobAt: Timestamp?
    package var pushProvider: String?
    package var pushUpdatedAt: Timestamp?
    package var pushLastSentAt: Timestamp?
    package var pushLastError: String?
    /// A live connection on a front whose presence is fresh (known only while nudging is configured).
    package var live = false

    /// A device known by its id alone; the drivers fill in what they read.
    package init(deviceID: String) {
        self.deviceID = deviceID
    }

    package var json: JSONValue {
        [
            "device_id": .string(deviceID), "watermark": watermark.map(JSONValue.int) ?? .null,
            "last_job_at": lastJobAt.map { .string($0.rfc3339) } ?? .null, "live": .bool(live),
            "push": pushProvider.map { provider in
                [
                    "provider": .string(provider), "updated_at": pushUpdatedAt.map { .string($0.rfc3339) } ?? .null,
                    "last_sent_at": pushLastSentAt.map { .string($0.rfc3339) } ?? .null, "last_error": pushLastError.map(JSONValue.string) ?? .null,
                ]
            } ?? .null,
        ]
    }
}

/// What erasing a user deleted.
package struct ErasedUser: Sendable, Hashable {
    package var jobs = 0
    package var entities = 0
    package var changes = 0
    package var idempotencyRecords = 0
    package var devices = 0
    package var pushRegistrations = 0
    /// Changes in the user's households whose writer was one of the user's devices, which now
    /// name no writer.
    package var householdChangesUnattributed = 0

    package init() {}

    package var json: JSONValue {
        [
            "jobs": .int(Int64(jobs)), "entities": .int(Int64(entities)), "changes": .int(Int64(changes)),
            "idempotency_records": .int(Int64(idempotencyRecords)), "devices": .int(Int64(devices)),
            "push_registrations": .int(Int64(pushRegistrations)), "household_changes_unattributed": .int(Int64(householdChangesUnattributed)),
        ]
    }
}

/// How an erase went (``SyncStore/eraseUser(_:)``).
package enum EraseOutcome: Sendable, Hashable {
    case erased(ErasedUser)
    /// The user is first leaving the households they are an active member of (archiving those
    /// they own) through this job, as their own push would; erase again once it finished.
    case leavingHouseholds(jobID: Int64)
}

extension HouseholdState {
    /// As the admin API and `syncgate admin households --json` show it.
    package var json: JSONValue {
        [
            "household_id": .string(id), "owner_id": .string(ownerID), "archived": .bool(archived),
            "members": .array(members.sorted { $0.key < $1.key }.map { ["user_id": .string($0.key.id), "role": .string($0.value.rawValue)] }),
        ]
    }
}

extension ServiceKeyRecord {
    /// A key as listed (never the key itself): `syncgate admin keys list --json`, `GET /admin/v1/keys`.
    package var json: JSONValue {
        [
            "name": .string(name), "hint": .string(hint), "scopes": .array(scopes.sorted().map { .string($0.rawValue) }),
            "reach": reach?.json ?? .null, "created_at": .string(createdAt.rfc3339), "revoked_at": revokedAt.map { .string($0.rfc3339) } ?? .null,
        ]
    }
}
