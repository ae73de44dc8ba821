public import Foundation

/// Where the client's sync stands, as one value: ``SyncClient/status`` now, and
/// ``SyncClient/statusUpdates()`` (or ``SyncStatusModel`` in SwiftUI) as it changes.
public struct SyncStatus: Sendable, Hashable {
    /// Whether the server can be reached, as the last exchange with it showed.
    public enum Connection: Sendable, Hashable {
        /// Nothing tried yet, or the last exchange got no answer (no network, the server down).
        case offline
        /// An exchange is under way after being offline.
        case connecting
        /// The last exchange got an answer (any answer: a refusal is an answer too).
        case connected
    }

    /// The server's reachability.
    public var connection: Connection = .offline
    /// Whether live sync runs (``SyncClient/startLive()``).
    public var isLive = false
    /// Whether writes are being pushed (or their jobs followed) now.
    public var isUploading = false
    /// Whether changes are being pulled now.
    public var isDownloading = false
    /// The pull under way: what it has brought so far.
    public var download: DownloadProgress?
    /// Writes the server has not decided yet.
    public var pendingWrites = 0
    /// When a sync last finished without error (kept across launches).
    public var lastSyncedAt: Date?
    /// The error of the last sync, until one succeeds.
    public var lastError: SyncGateClientError?

    /// A status (for previews and tests; the client makes them).
    public init(
        connection: Connection = .offline, isLive: Bool = false, isUploading: Bool = false, isDownloading: Bool = false,
        download: DownloadProgress? = nil, pendingWrites: Int = 0, lastSyncedAt: Date? = nil, lastError: SyncGateClientError? = nil
    ) {
        self.connection = connection
        self.isLive = isLive
        self.isUploading = isUploading
        self.isDownloading = isDownloading
        self.download = download
        self.pendingWrites = pendingWrites
        self.lastSyncedAt = lastSyncedAt
        self.lastError = lastError
    }
}

/// What a pull under way has brought. The server does not say how many changes remain, so a
/// progress view shows counts (or an indeterminate bar), not a fraction.
public struct DownloadProgress: Sendable, Hashable {
    /// Whether the pull started from the beginning of the feeds: a first sync, or a resync.
    public var isBootstrap: Bool
    /// Changes received so far.
    public var changes: Int
    /// Bytes of pull pages received so far.
    public var bytes: Int

    /// A progress value.
    public init(isBootstrap: Bool, changes: Int = 0, bytes: Int = 0) {
        self.isBootstrap = isBootstrap
        self.changes = changes
        self.bytes = bytes
    }
}
