/// An instant with millisecond precision, as the protocol exchanges it.
///
/// Input accepts any RFC 3339 offset and fractional precision (digits past milliseconds are
/// truncated); output is always UTC with exactly three fractional digits.
public struct Timestamp: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var millisecondsSinceEpoch: Int64

    public init(millisecondsSinceEpoch: Int64) {
        self.millisecondsSinceEpoch = millisecondsSinceEpoch
    }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool {
        lhs.millisecondsSinceEpoch < rhs.millisecondsSinceEpoch
    }

    public func adding(milliseconds: Int64) -> Timestamp {
        Timestamp(millisecondsSinceEpoch: millisecondsSinceEpoch + milliseconds)
    }

    public var description: String { rfc3339 }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    public var rfc3339: String {
        let (days, millisOfDay) = Self.floorDivide(millisecondsSinceEpoch, 86_400_000)
        let date = CalendarDate(daysSinceEpoch: days)
        let hour = millisOfDay / 3_600_000
        let minute = millisOfDay / 60_000 % 60
        let second = millisOfDay / 1000 % 60
        let millis = millisOfDay % 1000
        guard (0...9999).contains(date.year) else { return Self.interpolated(date, hour, minute, second, millis) }
        // Written digit by digit into the string's own storage: every change of every pull page
        // has one, too many for seven padded pieces and an interpolation.
        return String(unsafeUninitializedCapacity: 24) { buffer in
            func put(_ value: Int64, width: Int, at offset: Int) {
                var rest = value
                for position in stride(from: offset + width - 1, through: offset, by: -1) {
                    buffer[position] = UInt8(ascii: "0") + UInt8(rest % 10)
                    rest /= 10
                }
            }
            put(date.year, width: 4, at: 0)
            buffer[4] = UInt8(ascii: "-")
            put(date.month, width: 2, at: 5)
            buffer[7] = UInt8(ascii: "-")
            put(date.day, width: 2, at: 8)
            buffer[10] = UInt8(ascii: "T")
            put(hour, width: 2, at: 11)
            buffer[13] = UInt8(ascii: ":")
            put(minute, width: 2, at: 14)
            buffer[16] = UInt8(ascii: ":")
            put(second, width: 2, at: 17)
            buffer[19] = UInt8(ascii: ".")
            put(millis, width: 3, at: 20)
            buffer[23] = UInt8(ascii: "Z")
            return 24
        }
    }

    /// ``rfc3339`` for any year (beyond four digits, or before year 0).
    static func interpolated(_ date: CalendarDate, _ hour: Int64, _ minute: Int64, _ second: Int64, _ millis: Int64) -> String {
        "\(date.iso8601)T\(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2)).\(pad(millis, 3))Z"
    }

    /// Parses an RFC 3339 date-time; `nil` when the text is not one.
    public init?(rfc3339 text: String) {
        let bytes = Array(text.utf8)
        // Minimum: YYYY-MM-DDTHH:MM:SSZ
        guard bytes.count >= 20, bytes.count <= 64 else { return nil }
        guard let date = CalendarDate(iso8601Bytes: bytes[0..<10]) else { return nil }
        let separator = bytes[10]
        guard separator == UInt8(ascii: "T") || separator == UInt8(ascii: "t") || separator == UInt8(ascii: " ") else {
            return nil
        }
        guard let hour = digits(bytes, 11, 2), bytes[13] == UInt8(ascii: ":"),
            let minute = digits(bytes, 14, 2), bytes[16] == UInt8(ascii: ":"),
            let second = digits(bytes, 17, 2),
            hour < 24, minute < 60, second <= 60
        else { return nil }
        var index = 19
        var millis: Int64 = 0
        if bytes[index] == UInt8(ascii: ".") {
            index += 1
            var fractionDigits = 0
            while index < bytes.count, let digit = digits(bytes, index, 1) {
                if fractionDigits < 3 { millis = millis * 10 + digit }
                fractionDigits += 1
                index += 1
            }
            guard fractionDigits > 0 else { return nil }
            for _ in min(fractionDigits, 3)..<3 { millis *= 10 }
        }
        guard index < bytes.count else { return nil }
        var offsetMinutes: Int64 = 0
        switch bytes[index] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            index += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            let sign: Int64 = bytes[index] == UInt8(ascii: "-") ? -1 : 1
            guard index + 6 == bytes.count, let offsetHour = digits(bytes, index + 1, 2),
                bytes[index + 3] == UInt8(ascii: ":"), let offsetMinute = digits(bytes, index + 4, 2),
                offsetHour < 24, offsetMinute < 60
            else { return nil }
            offsetMinutes = sign * (offsetHour * 60 + offsetMinute)
            index += 6
        default:
            return nil
        }
        guard index == bytes.count else { return nil }
        // A leap second (:60) is read as the last millisecond of that minute.
        let secondOfDay = hour * 3600 + minute * 60 + min(second, 59)
        let extraMillis: Int64 = second == 60 ? 999 : millis
        let local = (date.daysSinceEpoch * 86_400 + secondOfDay) * 1000 + extraMillis
        self.millisecondsSinceEpoch = local - offsetMinutes * 60_000
    }

    static func floorDivide(_ value: Int64, _ divisor: Int64) -> (quotient: Int64, remainder: Int64) {
        let quotient = value >= 0 ? value / divisor : -((-value - 1) / divisor) - 1
        return (quotient, value - quotient * divisor)
    }
}

/// A calendar day (`YYYY-MM-DD`), as used by `date` fields and daily summaries.
public struct CalendarDate: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var year: Int64
    public var month: Int64
    public var day: Int64

    public init?(year: Int64, month: Int64, day: Int64) {
        guard (0...9999).contains(year), (1...12).contains(month),
            (1...Self.daysInMonth(year: year, month: month)).contains(day)
        else { return nil }
        self.year = year
        self.month = month
        self.day = day
    }

    /// Parses exactly `YYYY-MM-DD`.
    public init?(iso8601 text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count == 10 else { return nil }
        self.init(iso8601Bytes: bytes[0..<10])
    }

    init?(iso8601Bytes bytes: ArraySlice<UInt8>) {
        let bytes = Array(bytes)
        guard bytes.count == 10, let year = digits(bytes, 0, 4), bytes[4] == UInt8(ascii: "-"),
            let month = digits(bytes, 5, 2), bytes[7] == UInt8(ascii: "-"), let day = digits(bytes, 8, 2)
        else { return nil }
        self.init(year: year, month: month, day: day)
    }

    /// Days since 1970-01-01 (Howard Hinnant's days-from-civil).
    public var daysSinceEpoch: Int64 {
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = (shiftedYear >= 0 ? shiftedYear : shiftedYear - 399) / 400
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    public init(daysSinceEpoch days: Int64) {
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        self.day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        self.month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        self.year = yearOfEra + era * 400 + (self.month <= 2 ? 1 : 0)
    }

    public var iso8601: String { "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))" }
    public var description: String { iso8601 }

    public static func < (lhs: CalendarDate, rhs: CalendarDate) -> Bool {
        (lhs.year, lhs.month, lhs.day) < (rhs.year, rhs.month, rhs.day)
    }

    static func daysInMonth(year: Int64, month: Int64) -> Int64 {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}

private func digits(_ bytes: [UInt8], _ start: Int, _ count: Int) -> Int64? {
    guard start + count <= bytes.count else { return nil }
    var value: Int64 = 0
    for index in start..<(start + count) {
        let byte = bytes[index]
        guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
        value = value * 10 + Int64(byte - UInt8(ascii: "0"))
    }
    return value
}

private func pad(_ value: Int64, _ width: Int) -> String {
    let text = String(value)
    return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
}
