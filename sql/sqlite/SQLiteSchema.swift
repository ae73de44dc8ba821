/// The SQLite migrations of this folder, embedded in the binary at build time, in order: the
/// files a reader sees are exactly the SQL that `syncgate migrate` runs.
package enum SQLiteSchema {
    /// `breaksOlderServers`: servers built for an earlier schema cannot run against it (it drops,
    /// renames or changes the meaning of something they use); `false` for additive migrations.
    package static let files: [(version: Int, name: String, breaksOlderServers: Bool, sql: [UInt8])] = [
        (1, "initial", true, PackageResources._001_initial_sql),
        (2, "group_keys", true, PackageResources._002_group_keys_sql),
        (3, "scopes_version", true, PackageResources._003_scopes_version_sql),
        (4, "commit_times", false, PackageResources._004_commit_times_sql),
        (5, "incremental_maintenance", false, PackageResources._005_incremental_maintenance_sql),
        (6, "uncompacted_feeds", false, PackageResources._006_uncompacted_feeds_sql),
        (7, "service_keys", false, PackageResources._007_service_keys_sql),
        (8, "change_origin", false, PackageResources._008_change_origin_sql),
        (9, "webhooks", false, PackageResources._009_webhooks_sql),
        (10, "webhook_ranges", true, PackageResources._010_webhook_ranges_sql),
        (11, "push_registrations", false, PackageResources._011_push_registrations_sql),
        (12, "job_errors", false, PackageResources._012_job_errors_sql),
        (13, "maintenance_runs", false, PackageResources._013_maintenance_runs_sql),
        (14, "push_attempts", false, PackageResources._014_push_attempts_sql),
        (15, "webhook_claims", false, PackageResources._015_webhook_claims_sql),
        (16, "service_key_reach", false, PackageResources._016_service_key_reach_sql),
    ]
}
