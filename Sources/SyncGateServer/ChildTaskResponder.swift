import Hummingbird

/// Computes the responses of connections that stay open after their route returns (event
/// streams) in a child task, so the connection's own task waits with a shallow stack.
///
/// Each connection is one long-lived task, and a task keeps every slab of async frames it has
/// allocated until it ends: an event stream's connection held the slabs of the middleware chain,
/// the route and its reads (~17 KiB) for as long as it streamed. A child task returns its slabs
/// when it ends; the stream's body is then written from the connection's task. Other requests
/// run inline: a child task per push would cost the write path a task for nothing, and a
/// long-poll waits inside its route, so a child would hold the same frames.
struct ChildTaskResponder<Base: HTTPResponder>: HTTPResponder where Base.Context: Sendable {
    typealias Context = Base.Context
    let base: Base
    /// The paths whose responses are computed in a child task.
    let streamPaths: Set<String>

    @Sendable func respond(to request: Request, context: Context) async throws -> Response {
        guard streamPaths.contains(request.uri.path) else { return try await base.respond(to: request, context: context) }
        return try await respondInChildTask(to: request, context: context)
    }

    /// Apart from `respond`, whose async frame every request's task keeps: an `async let`
    /// reserves its room in the frame of the function that declares it (~2 KiB).
    @inline(never)
    private func respondInChildTask(to request: Request, context: Context) async throws -> Response {
        async let response = base.respond(to: request, context: context)
        return try await response
    }
}
