import SyncGateCore
import Testing

@testable import SyncGateWire

@Suite(.timeLimit(.minutes(10))) struct TimestampTests {
    @Test(arguments: [
        ("2026-01-15T10:00:00.123Z", "2026-01-15T10:00:00.123Z"),
        ("2026-01-15T10:00:00Z", "2026-01-15T10:00:00.000Z"),
        ("2026-01-15t10:00:00.1z", "2026-01-15T10:00:00.100Z"),
        ("2026-01-15 10:00:00.123456789Z", "2026-01-15T10:00:00.123Z"),
        ("2026-01-15T12:30:00.000+02:30", "2026-01-15T10:00:00.000Z"),
        ("2026-01-15T00:00:00-05:00", "2026-01-15T05:00:00.000Z"),
        ("1970-01-01T00:00:00Z", "1970-01-01T00:00:00.000Z"),
        ("1969-12-31T23:59:59.999Z", "1969-12-31T23:59:59.999Z"),
        ("2024-02-29T23:59:60Z", "2024-02-29T23:59:59.999Z"),
        ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00.000Z"),
        ("9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"),
    ])
    func parsesAndFormatsRFC3339(_ input: String, _ expected: String) throws {
        let timestamp = try #require(Timestamp(rfc3339: input))
        #expect(timestamp.rfc3339 == expected)
        #expect(Timestamp(rfc3339: timestamp.rfc3339) == timestamp)
    }

    @Test(arguments: [
        "", "2026-01-15", "2026-01-15T10:00:00", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z",
        "2025-02-29T00:00:00Z", "2026-01-15T24:00:00Z", "2026-01-15T10:60:00Z", "2026-01-15T10:00:61Z",
        "2026-01-15T10:00:00.Z", "2026-01-15T10:00:00+0200", "2026-01-15T10:00:00+24:00", "2026-1-15T10:00:00Z",
        "2026-01-15X10:00:00Z", "2026-01-15T10:00:00Zjunk", "２０２６-01-15T10:00:00Z",
    ])
    func rejectsNonRFC3339(_ input: String) {
        #expect(Timestamp(rfc3339: input) == nil)
    }

    /// The digit-by-digit writer agrees with the interpolated form on instants across the four-digit
    /// years, and years outside them still format.
    @Test func theFastFormatAgreesWithTheInterpolatedOne() {
        var random = SeededGenerator(seed: 3339)
        let first = -62_167_219_200_000 as Int64  // 0000-01-01
        let last = 253_402_300_799_999 as Int64  // 9999-12-31T23:59:59.999
        for instant in [first, last, 0, -1] + (0..<20_000).map({ _ in Int64.random(in: first...last, using: &random) }) {
            let (days, millisOfDay) = Timestamp.floorDivide(instant, 86_400_000)
            let expected = Timestamp.interpolated(
                CalendarDate(daysSinceEpoch: days), millisOfDay / 3_600_000, millisOfDay / 60_000 % 60, millisOfDay / 1000 % 60, millisOfDay % 1000
            )
            #expect(Timestamp(millisecondsSinceEpoch: instant).rfc3339 == expected)
        }
        #expect(Timestamp(millisecondsSinceEpoch: last + 1).rfc3339 == "10000-01-01T00:00:00.000Z")
    }

    @Test func epochArithmeticMatchesKnownInstants() throws {
        #expect(Timestamp(rfc3339: "2026-01-15T10:00:00.123Z")?.millisecondsSinceEpoch == 1_768_471_200_123)
        #expect(Timestamp(millisecondsSinceEpoch: -1).rfc3339 == "1969-12-31T23:59:59.999Z")
    }

    @Test func calendarDatesRoundTripEveryDayOfFourCenturies() {
        var previous: CalendarDate?
        for days in Int64(-146_097)...Int64(146_097 * 2) {
            let date = CalendarDate(daysSinceEpoch: days)
            #expect(date.daysSinceEpoch == days)
            if let previous { #expect(previous < date) }
            previous = date
            if days % 997 == 0 { #expect(CalendarDate(iso8601: date.iso8601) == date) }
        }
    }

    @Test(arguments: ["2026-01-15", "2024-02-29", "2000-02-29", "0000-01-01"])
    func acceptsValidDates(_ text: String) { #expect(CalendarDate(iso8601: text)?.iso8601 == text) }

    @Test(arguments: ["2026-1-15", "2023-02-29", "1900-02-29", "2026-00-10", "2026-01-32", "20260115", "2026-01-15T00:00:00Z", ""])
    func rejectsInvalidDates(_ text: String) { #expect(CalendarDate(iso8601: text) == nil) }
}
