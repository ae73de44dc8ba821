/// The PostgreSQL migrations of this folder, embedded in the binary at build time, in order:
/// the files a DBA reads are exactly the SQL that `syncgate migrate` runs.
package enum PostgresSchema {
    /// `breaksOlderServers`: servers built for an earlier schema cannot run against it (it drops,
    /// renames or changes the meaning of something they use); `false` for additive migrations.
    package static let files: [(version: Int, name: String, breaksOlderServers: Bool, sql: [UInt8])] = [
        (1, "initial", true, PackageResources._001_initial_sql),
        (2, "group_keys", true, PackageResources._002_group_keys_sql),
        (3, "scopes_version", true, PackageResources._003_scopes_version_sql),
        (4, "enqueue", false, PackageResources._004_enqueue_sql),
        (5, "commit_times", false, PackageResources._005_commit_times_sql),
        (6, "incremental_maintenance", false, PackageResources._006_incremental_maintenance_sql),
        (7, "uncompacted_feeds", false, PackageResources._007_uncompacted_feeds_sql),
        (8, "enqueue_without_notify", false, PackageResources._008_enqueue_without_notify_sql),
        (9, "job_compression", false, PackageResources._009_job_compression_sql),
        (10, "service_keys", false, PackageResources._010_service_keys_sql),
        (11, "change_origin", false, PackageResources._011_change_origin_sql),
        (12, "webhooks", false, PackageResources._012_webhooks_sql),
        // Servers built before it write message bodies into a column it drops.
        (13, "webhook_ranges", true, PackageResources._013_webhook_ranges_sql),
        (14, "push_registrations", false, PackageResources._014_push_registrations_sql),
        (15, "job_errors", false, PackageResources._015_job_errors_sql),
        (16, "maintenance_runs", false, PackageResources._016_maintenance_runs_sql),
        (17, "push_attempts", false, PackageResources._017_push_attempts_sql),
        (18, "webhook_claims", false, PackageResources._018_webhook_claims_sql),
        (19, "service_key_reach", false, PackageResources._019_service_key_reach_sql),
    ]
}
