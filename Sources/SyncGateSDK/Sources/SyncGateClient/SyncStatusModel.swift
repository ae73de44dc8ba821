#if canImport(Observation)
public import Observation
import SyncGateConcurrency

/// The client's ``SyncStatus`` for SwiftUI: an `@Observable` model a view reads, updated on the
/// main actor as the status changes (iOS 17, macOS 14 and later, where Observation exists; on
/// iOS 16 iterate ``SyncClient/statusUpdates()`` instead).
///
/// ```swift
/// struct SyncBadge: View {
///     let model: SyncStatusModel
///     var body: some View {
///         if model.status.isDownloading { ProgressView() }
///         else if model.status.pendingWrites > 0 { Text("\(model.status.pendingWrites) unsynced") }
///     }
/// }
/// ```
@available(iOS 17, macOS 14, tvOS 17, watchOS 10, visionOS 1, *)
@MainActor
@Observable
public final class SyncStatusModel {
    /// The status, as of the last update delivered to the main actor.
    public private(set) var status: SyncStatus

    @ObservationIgnored private let subscription = Locked<Task<Void, Never>?>(nil)

    /// A model following `client`'s status until it is released or the client closes.
    public init(client: SyncClient) {
        let updates = client.statusUpdates()
        status = client.status
        let task = Task { @MainActor [weak self] in
            for await status in updates {
                guard let self else { return }
                self.status = status
            }
        }
        subscription.update { $0 = task }
    }

    deinit {
        subscription.value?.cancel()
    }
}
#endif
