/// Splits a migration script into statements, for drivers that run one statement per query.
///
/// Semicolons inside quoted strings ('…'), quoted identifiers ("…"), dollar-quoted bodies
/// ($tag$…$tag$), line comments (-- …) and block comments (/* … */) do not end a statement.
package enum SQLScript {
    package static func statements(_ script: String) -> [String] {
        let characters = Array(script.unicodeScalars)
        var statements: [String] = []
        var current = String.UnicodeScalarView()
        var index = 0

        func append(_ range: Range<Int>) {
            current.append(contentsOf: characters[range])
        }
        func finishStatement() {
            let text = String(current).trimmingWhitespace()
            if !text.isEmpty, !isOnlyComments(text) { statements.append(text) }
            current = String.UnicodeScalarView()
        }

        while index < characters.count {
            let character = characters[index]
            let next = index + 1 < characters.count ? characters[index + 1] : nil
            switch character {
            case "'", "\"":
                var end = index + 1
                while end < characters.count {
                    if characters[end] == character {
                        // A doubled quote is an escaped quote.
                        if end + 1 < characters.count, characters[end + 1] == character {
                            end += 2
                            continue
                        }
                        break
                    }
                    end += 1
                }
                let stop = min(end + 1, characters.count)
                append(index..<stop)
                index = stop
            case "-" where next == "-":
                var end = index
                while end < characters.count, characters[end] != "\n" { end += 1 }
                append(index..<end)
                index = end
            case "/" where next == "*":
                var end = index + 2
                while end + 1 < characters.count, !(characters[end] == "*" && characters[end + 1] == "/") { end += 1 }
                let stop = min(end + 2, characters.count)
                append(index..<stop)
                index = stop
            case "$":
                // $tag$ … $tag$ (the tag may be empty).
                var tagEnd = index + 1
                while tagEnd < characters.count, characters[tagEnd].properties.isAlphabetic || characters[tagEnd] == "_" { tagEnd += 1 }
                guard tagEnd < characters.count, characters[tagEnd] == "$" else {
                    append(index..<(index + 1))
                    index += 1
                    continue
                }
                let tag = Array(characters[index...tagEnd])
                var end = tagEnd + 1
                while end + tag.count <= characters.count, Array(characters[end..<(end + tag.count)]) != tag { end += 1 }
                let stop = min(end + tag.count, characters.count)
                append(index..<stop)
                index = stop
            case ";":
                finishStatement()
                index += 1
            default:
                current.append(character)
                index += 1
            }
        }
        finishStatement()
        return statements
    }

    static func isOnlyComments(_ text: String) -> Bool {
        text.split(separator: "\n").allSatisfy { $0.trimmingWhitespace().isEmpty || $0.trimmingWhitespace().hasPrefix("--") }
    }
}

extension StringProtocol {
    func trimmingWhitespace() -> String {
        let scalars = Array(unicodeScalars)
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
            let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })
        else { return "" }
        var result = String.UnicodeScalarView()
        result.append(contentsOf: scalars[first...last])
        return String(result)
    }
}
