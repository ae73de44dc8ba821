import SyncGateCore
import Testing

@Suite(.timeLimit(.minutes(10))) struct DurationTextTests {
    @Test(arguments: [("500ms", 500 as Int64?), ("45s", 45_000), ("90m", 5_400_000), ("12h", 43_200_000), ("30d", 2_592_000_000), ("7", 7000), (" 2h ", 7_200_000)])
    func parsesUnits(_ text: String, _ expected: Int64?) {
        #expect(DurationText.milliseconds(text) == expected)
    }

    @Test(arguments: ["", "h", "1.5h", "-1d", "10w", "1e3s", "99999999999999999999d", "d30"])
    func rejectsEverythingElse(_ text: String) {
        #expect(DurationText.milliseconds(text) == nil)
    }
}
