import Hummingbird
import Tracing

/// Every request to the front, in one async layer: observed outermost (it sees the status the
/// client gets, unknown routes and refusals included), every failure then turned into a protocol
/// error (the authenticator's included), and answers compressed when the client accepts gzip.
///
/// One middleware, not three: a waiting request's task keeps the async frames of every function
/// on its path, each costing it up to a slab (~1 KiB) of the task allocator, and a middleware is
/// three such functions (its protocol witness, its `handle`, Hummingbird's closure around it).
/// As one, an idle long-poll holds ~3 KiB less (docs/performance-log.md).
struct FrontMiddleware: RouterMiddleware {
    typealias Context = SyncRequestContext
    let observation: RequestObservation
    let errors: ProtocolErrorMiddleware<SyncRequestContext>
    let compression: ResponseCompression

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let (started, span) = observation.begin(request)
        var response: Response
        do {
            response = try await ServiceContext.withValue(span.context) {
                try await next(request, context)
            }
            response = try await compression.apply(to: response, for: request)
        } catch {
            // In the span: a failure's log line carries the request's trace id.
            response = ServiceContext.withValue(span.context) { errors.answer(error, to: request, context: context) }
        }
        return observation.end(response, request: request, context: context, started: started, span: span)
    }
}
