/// A command whose Swift concurrency jobs run on NIO's event loops
/// (`MultiThreadedEventLoopGroup.singleton`, which PostgresNIO and AsyncHTTPClient use) instead of
/// the concurrency runtime's own thread pool: a task that awaits a database answer or a socket
/// then resumes on the thread that read it, instead of waking a second thread. The price: code
/// that blocks a thread blocks an event loop — these commands' code does not block. `serve` does
/// not adopt it: with many idle connections it cost more CPU and slowed fan-out
/// (docs/performance-log.md has the measurements).
///
/// NIO installs the hook through `dlsym`, so only where the Swift runtime is a shared library: in a
/// binary built with `--static-swift-stdlib` (`deploy/Dockerfile`, `scripts/bench`) these commands
/// run on the runtime's pool like the others.
///
/// `SendableMetatype`: no conformance to it is isolated to an actor, so `main` may ask a parsed
/// command for it on the main thread and then hand the command to its nonisolated `run`.
package protocol RunsOnEventLoops: SendableMetatype {}
