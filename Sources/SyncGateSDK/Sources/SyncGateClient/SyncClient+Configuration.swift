import SyncGateWire
public import Logging
public import Foundation

extension SyncClient {
    /// How a client connects, where it keeps its data, and how it paces sync.
    ///
    /// Only the server, the database file and the token provider are required; the rest has
    /// defaults that suit a mobile app. Waits and sizes outside the protocol's ranges are clamped.
    public struct Configuration: Sendable {
        /// The server's base URL, e.g. `https://sync.example.com`.
        public var serverURL: URL
        /// The SQLite file of this device's data (created if missing). One file per signed-in user.
        public var databasePath: String
        /// Returns a bearer token for the signed-in user. Called when the client has none yet,
        /// when the one it has (a JWT) expires within ``tokenRefreshMargin``, and when the server
        /// refuses it (401): return a fresh token then.
        public var token: @Sendable () async throws -> String
        /// How long before a JWT's `exp` the client asks for a fresh one, so that no request
        /// goes out with a token about to expire. Tokens that are not JWTs are kept until refused.
        public var tokenRefreshMargin: Duration = .seconds(60)
        /// The device id (`X-Device-Id`: 1–128 of `A-Za-z0-9._:-`); `nil` makes one the first
        /// time and keeps it in the database.
        public var deviceID: String?
        /// Types the server derives and refuses writes to (e.g. `dailySummaries`): writing one
        /// locally throws at once instead of being rejected by the server later.
        public var readOnlyTypes: Set<String> = []
        /// SQLite indexes on fields of documents, for the queries the app runs (``EntityQuery``).
        public var indexes: [LocalIndex] = []
        /// How long a push waits for its job (`wait`, at most 30 s); longer jobs are followed with ``jobFollowWait``.
        public var pushWait: Duration = .seconds(5)
        /// The `wait` of each job follow-up request (1 to 30 s).
        public var jobFollowWait: Duration = .seconds(10)
        /// How long one sync follows an unfinished job before leaving it to the next sync.
        public var jobFollowLimit: Duration = .seconds(60)
        /// Changes per pull page (1 to 1,000).
        public var pullPageSize: Int = 500
        /// Operations per push (1 to 1,000, the protocol's maximum; a server configured lower
        /// refuses larger batches with 400, and the client then halves them).
        public var batchOperations: Int = 500
        /// Approximate bytes per push (the server's default body limit is 4 MiB).
        public var batchBytes: Int = 1 << 20
        /// How long a request may take beyond its `wait`.
        public var requestTimeout: Duration = .seconds(30)
        /// Delays between failed attempts in live sync.
        public var backoff: Backoff = Backoff()
        /// How live sync learns of changes.
        public var live: LiveOptions = LiveOptions()
        /// Where the client logs (at debug and below, except failures of live sync).
        public var logger: Logger = Logger(label: "SyncGateClient")

        /// A configuration with defaults for everything but the server, the file and the token.
        public init(serverURL: URL, databasePath: String, deviceID: String? = nil, token: @escaping @Sendable () async throws -> String) {
            self.serverURL = serverURL
            self.databasePath = databasePath
            self.deviceID = deviceID
            self.token = token
        }
    }

    /// How live sync learns of changes on the server.
    public struct LiveOptions: Sendable, Hashable {
        /// Server-sent events, with long-poll while the event stream is down; or long-poll only.
        public enum Mode: Sendable, Hashable {
            /// `GET /v1/sync/events`: a pull on every poke; long-poll while the stream is down.
            case serverSentEvents
            /// `GET /v1/sync/pull?wait=` only, for networks that cut long-lived streams.
            case longPoll
        }

        /// The way to listen; server-sent events by default.
        public var mode: Mode = .serverSentEvents
        /// The `wait` of a long-poll pull (1 to 60 s).
        public var longPollWait: Duration = .seconds(25)
        /// An event stream silent this long is dead (the server sends a comment every 15 s).
        public var eventStreamIdleTimeout: Duration = .seconds(45)
        /// With an event stream open, sync anyway this often, in case a poke was lost.
        public var safetyInterval: Duration = .seconds(300)

        /// The defaults.
        public init() {}
    }
}
