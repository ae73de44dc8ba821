import Foundation
import SyncGateTestSupport
import Testing

/// The ports tests start servers on. A port from `bind` to port 0 lies in the kernel's ephemeral
/// range, where it can be handed out again (to another test, or as the local port of an
/// outgoing connection) between the pick and the server's bind: a server then exits with
/// "Address already in use" (once in a full run, in EmbeddedModeTests). The scripts started
/// beside the tests (`scripts/cluster`) pick from 20,000 up, so tests pick below it.
@Suite struct FreePortTests {
    @Test func portsAreNeverHandedOutTwiceAndLieBelowTheEphemeralRange() throws {
        let range = try String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)
        let ephemeralStart = try #require(range.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) })
        let ports = (0..<200).map { _ in SyncGateProcess.freePort() }
        #expect(Set(ports).count == ports.count, "a port was handed out twice")
        #expect(ports.allSatisfy { $0 >= 10_000 && $0 < min(ephemeralStart, 20_000) }, "ports outside 10,000..<20,000 or in the ephemeral range: \(ports.filter { $0 < 10_000 || $0 >= min(ephemeralStart, 20_000) }.prefix(5))")
    }
}
