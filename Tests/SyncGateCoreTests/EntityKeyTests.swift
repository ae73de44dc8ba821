import Testing

import SyncGateCore

/// Keys compare as the databases compare them: by bytes, not by Swift's canonical equivalence.
@Suite(.timeLimit(.minutes(10))) struct EntityKeyTests {
    static let ids = ["caf\u{E9}", "cafe\u{301}", "cafe", "caf", "Caf\u{E9}", "\u{1F600}", "a\u{0}b", "", "z"]

    static func key(_ scope: Scope, _ id: String) -> EntityKey { EntityKey(scope: scope, entityType: "weightLogs", entityID: id) }

    @Test func equalityHashAndOrderFollowTheBytes() {
        let scopes: [Scope] = [.user("caf\u{E9}"), .user("cafe\u{301}"), .household("caf\u{E9}"), .household("cafe\u{301}")]
        let keys = scopes.flatMap { scope in Self.ids.map { Self.key(scope, $0) } }
        for a in keys {
            for b in keys {
                let same = a.scope.key.utf8.elementsEqual(b.scope.key.utf8) && a.entityID.utf8.elementsEqual(b.entityID.utf8)
                #expect((a == b) == same, "\(a) \(b)")
                if same { #expect(a.hashValue == b.hashValue) }
                // A strict total order: exactly one of <, ==, >.
                #expect([a < b, a == b, b < a].filter { $0 }.count == 1, "\(a) \(b)")
            }
        }
        #expect(Set(keys).count == keys.count)
        #expect(Set(scopes).count == 4)
        // ASCII keys keep the order they always had.
        #expect(Self.key(.user("a"), "b") < Self.key(.user("a"), "c") && Scope.household("x") < Scope.user("a"))
    }

    @Test func scopesReadBackFromTheirKeysWhateverTheirIDsBeginWith() {
        for id in Self.ids + ["\u{301}x", "\u{301}", ":", "u:x"] {
            for scope in [Scope.user(id), .household(id)] {
                #expect(Scope(key: scope.key) == scope, "\(scope.key.unicodeScalars.map(\.value))")
            }
        }
        for bad in ["", "u", "x:y", "h", "\u{301}h:x"] {
            #expect(Scope(key: bad) == nil)
        }
    }

    @Test func sameBytesIsByteEquality() {
        for a in Self.ids {
            for b in Self.ids {
                #expect(a.sameBytes(as: b) == (Array(a.utf8) == Array(b.utf8)))
                // Bridged or substring-made strings, whose UTF-8 may not be contiguous, agree too.
                #expect(String(a[...]).sameBytes(as: b) == a.sameBytes(as: b))
            }
        }
    }
}
