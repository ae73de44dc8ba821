import Hummingbird
import HTTPTypes
import Logging
import NIOEmbedded
@testable import SyncGateServer
import Testing

/// An event stream's response is computed in a child task, so the connection's task does not
/// keep the route's async frames while it streams; every other request runs in the caller's task.
@Suite struct ChildTaskResponderTests {
    /// Answers with the hash of the task that computed the response in a header.
    struct TaskReporter: HTTPResponder {
        typealias Context = BasicRequestContext
        @Sendable func respond(to request: Request, context: Context) async throws -> Response {
            let task = withUnsafeCurrentTask { $0?.hashValue } ?? 0
            return Response(status: .ok, headers: [.init("x-task")!: "\(task)"])
        }
    }

    func taskAnswering(_ path: String) async throws -> (caller: Int, responder: Int) {
        let responder = ChildTaskResponder(base: TaskReporter(), streamPaths: ["/v1/sync/events"])
        let request = Request(head: .init(method: .get, scheme: "http", authority: "localhost", path: path), body: .init(buffer: .init()))
        let context = BasicRequestContext(source: .init(channel: EmbeddedChannel(), logger: Logger(label: "test")))
        let response = try await responder.respond(to: request, context: context)
        let caller = withUnsafeCurrentTask { $0?.hashValue } ?? 0
        return (caller, Int(try #require(response.headers[.init("x-task")!]))!)
    }

    @Test func anEventStreamIsComputedInAChildTask() async throws {
        let tasks = try await taskAnswering("/v1/sync/events?since=1")
        #expect(tasks.caller != 0 && tasks.responder != 0)
        #expect(tasks.responder != tasks.caller)
    }

    @Test func otherRequestsRunInTheCallersTask() async throws {
        for path in ["/v1/sync/pull", "/v1/sync/push", "/v1/sync/events/more"] {
            let tasks = try await taskAnswering(path)
            #expect(tasks.responder == tasks.caller, "\(path)")
        }
    }
}
