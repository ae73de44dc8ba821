import SyncGateWire
/// Human durations for the CLI and environment: `500ms`, `45s`, `90m`, `12h`, `30d`, or a plain
/// number of seconds.
package enum DurationText {
    package static func milliseconds(_ text: String) -> Int64? {
        let trimmed = text.trimmingCharacters(in: " ")
        let units: [(String, Int64)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)]
        for (suffix, scale) in units where trimmed.hasSuffix(suffix) {
            let number = trimmed.dropLast(suffix.count)
            // "ms" also ends in "s": only accept digits before the unit.
            guard !number.isEmpty, number.allSatisfy(\.isASCIIDigit), let value = Int64(number) else { continue }
            let (product, overflow) = value.multipliedReportingOverflow(by: scale)
            return overflow ? nil : product
        }
        guard !trimmed.isEmpty, trimmed.allSatisfy(\.isASCIIDigit), let seconds = Int64(trimmed) else { return nil }
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        return overflow ? nil : product
    }
}

extension Character {
    var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}

extension String {
    func trimmingCharacters(in character: Character) -> String {
        var result = Substring(self)
        while result.first == character { result.removeFirst() }
        while result.last == character { result.removeLast() }
        return String(result)
    }
}
