import Foundation
import SyncGateTestSupport
import Testing

/// The documentation a new user reads in a clone: the README is a front door, every relative link
/// leads somewhere in the repository, and every `syncgate` command and script the docs show
/// exists with the flags they use. The performance log and history are archives of past runs,
/// kept as written: their commands are not held to today's.
@Suite(.timeLimit(.minutes(10))) struct DocumentationTests {
    static let root = DeployTests.root

    /// Every Markdown page of the repository but the build folders, also those of the packages
    /// inside it (the SDK's, the fixture app's: their checkouts hold other projects' pages).
    static var pages: [String] {
        let skipped: Set<Substring> = [".build", ".git", ".swiftpm"]
        return (FileManager.default.subpaths(atPath: root.path) ?? [])
            .filter { path in path.hasSuffix(".md") && !path.split(separator: "/").contains { skipped.contains($0) } }
            .sorted()
    }

    static let archives: Set<String> = ["docs/performance-log.md", "docs/performance-history.md"]

    static func text(_ page: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(page), encoding: .utf8)
    }

    /// The page's text outside fenced code blocks, and its fenced blocks (language, body).
    static func split(_ text: String) -> (prose: String, blocks: [(language: String, body: String)]) {
        var prose: [Substring] = []
        var blocks: [(String, String)] = []
        var current: (language: String, lines: [Substring])?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("```") {
                if let block = current {
                    blocks.append((block.language, block.lines.joined(separator: "\n")))
                    current = nil
                } else {
                    current = (String(trimmed.dropFirst(3)), [])
                }
            } else if current != nil {
                current!.lines.append(line)
            } else {
                prose.append(line)
            }
        }
        return (prose.joined(separator: "\n"), blocks)
    }

    /// GitHub's anchors for a page's headings: lower-cased, punctuation dropped, spaces as
    /// hyphens, a repeated heading numbered `-1`, `-2` …
    static func anchors(of text: String) -> Set<String> {
        var seen: [String: Int] = [:]
        var anchors = Set<String>()
        for line in split(text).prose.split(separator: "\n") where line.hasPrefix("#") {
            let heading = line.drop { $0 == "#" }.trimmingCharacters(in: .whitespaces)
            let slug = String(heading.lowercased().unicodeScalars.compactMap { scalar -> Character? in
                if scalar == " " { return "-" }
                if scalar == "-" || scalar == "_" || CharacterSet.alphanumerics.contains(scalar) { return Character(scalar) }
                return nil
            })
            let count = seen[slug, default: 0]
            anchors.insert(count == 0 ? slug : "\(slug)-\(count)")
            seen[slug] = count + 1
        }
        return anchors
    }

    @Test func everyRelativeLinkLeadsIntoTheRepository() throws {
        var checked = 0
        for page in Self.pages {
            let text = try Self.text(page)
            let folder = Self.root.appendingPathComponent(page).deletingLastPathComponent()
            for match in Self.split(text).prose.matches(of: /\]\(([^)\s]+)\)/) {
                let target = String(match.output.1)
                if target.hasPrefix("http://") || target.hasPrefix("https://") || target.hasPrefix("mailto:") { continue }
                checked += 1
                let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
                let path = String(parts[0]), anchor = parts.count > 1 ? String(parts[1]) : nil
                let resolved = path.isEmpty ? Self.root.appendingPathComponent(page) : folder.appendingPathComponent(path).standardizedFileURL
                #expect(resolved.path.hasPrefix(Self.root.standardizedFileURL.path + "/") || resolved.path == Self.root.standardizedFileURL.path, "\(page): \(target) leads out of the repository")
                #expect(FileManager.default.fileExists(atPath: resolved.path), "\(page): \(target) does not exist")
                if let anchor, resolved.pathExtension == "md", FileManager.default.fileExists(atPath: resolved.path) {
                    #expect(Self.anchors(of: try String(contentsOf: resolved, encoding: .utf8)).contains(anchor), "\(page): no heading for \(target)")
                }
            }
        }
        #expect(checked > 100, "only \(checked) relative links found")
    }

    @Test func theReadmeIsAFrontDoor() throws {
        let readme = try Self.text("README.md")
        let lines = readme.split(separator: "\n", omittingEmptySubsequences: false).count
        #expect(lines <= 500, "README.md has \(lines) lines")
        let contents = try #require(readme.range(of: "## Contents"), "a table of contents")
        let list = readme[contents.upperBound...]
        let table = list[..<(list.range(of: "\n## ")?.lowerBound ?? list.endIndex)]
        let sections = table.matches(of: /\]\(#([a-z0-9-]+)\)/).map { String($0.output.1) }
        #expect(sections.count >= 8 && Set(sections).isSubset(of: Self.anchors(of: readme)), "\(sections)")
        // The test command, and how to prove it on a busy machine.
        #expect(readme.contains("scripts/test") && readme.contains("stress-ng --cpu 2"))
        for page in Self.pages { #expect(!(try Self.text(page)).contains("../shared"), "\(page) points outside the repository") }
    }

    /// `syncgate …` in the docs' shell blocks (run as `swift run syncgate`, from
    /// `.build/release`, or on the PATH): the command exists and takes every flag shown; every
    /// `scripts/…` exists and can run.
    @Test func documentedCommandsAndScriptsExist() async throws {
        var helps: [String: String] = [:]
        var commands = 0
        for page in Self.pages where !Self.archives.contains(page) {
            for block in Self.split(try Self.text(page)).blocks where ["bash", "sh", "shell", "console", ""].contains(block.language) {
                for line in block.body.split(separator: "\n") {
                    let code = line.prefix { $0 != "#" }
                    for match in code.matches(of: /(?:^|[\s(])(?:swift run(?: -q)? |\.build\/release\/|\$\(|\b)syncgate((?: [a-z][a-z-]*)*)((?: [^|;&)]*)?)/) {
                        var words = match.output.1.split(separator: " ").map(String.init)
                        guard let first = words.first, !first.hasPrefix("demo") else { continue }
                        commands += 1
                        // Trailing lowercase words may be arguments (`admin keys revoke billing`):
                        // the command is the longest prefix that is one, and it must take them.
                        var arguments = 0
                        var help = ""
                        while !words.isEmpty {
                            let name = words.joined(separator: " ")
                            if helps[name] == nil {
                                let process = try SyncGateProcess(["help"] + words, environment: [:])
                                // An unknown subcommand gets its parent's help: the usage line tells.
                                helps[name] = await process.waitForExit(timeout: hangGuard) == 0 ? process.log : ""
                            }
                            help = helps[name]!
                            let usage = "USAGE: syncgate \(name)"
                            if help.contains(usage) && (arguments == 0 || help.contains("\nARGUMENTS:")) { break }
                            help = ""
                            words.removeLast()
                            arguments += 1
                        }
                        #expect(!help.isEmpty, "\(page): `syncgate \(match.output.1)` is not a command")
                        for flag in match.output.2.matches(of: /(?:^|\s)(--[a-z][a-z-]*)/).map({ String($0.output.1) }) {
                            #expect(help.contains(flag), "\(page): `syncgate \(words.joined(separator: " "))` has no \(flag)")
                        }
                    }
                    for match in code.matches(of: /(?:^|[\s(])(scripts\/[a-z-]+)/) {
                        let script = Self.root.appendingPathComponent(String(match.output.1)).path
                        #expect(FileManager.default.isExecutableFile(atPath: script), "\(page): \(match.output.1) is not an executable script")
                    }
                }
            }
        }
        #expect(commands > 20, "only \(commands) documented commands found")
    }
}
