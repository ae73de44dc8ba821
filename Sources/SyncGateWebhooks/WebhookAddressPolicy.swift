/// Which receiver addresses are refused (SSRF): a receiver URL set by an API caller must not make
/// the server post to itself, its neighbours or a cloud metadata endpoint. Pure: the resolver
/// hands it the addresses a host name has.
package enum WebhookAddressPolicy {
    /// Why a URL is refused, for the caller.
    package enum Refusal: Error, Sendable, Hashable, CustomStringConvertible {
        case notHTTP
        case noHost
        case credentials
        case oddHost
        case unresolvable(String)
        case privateAddress(String)

        package var description: String {
            switch self {
            case .notHTTP: "a receiver URL must be http:// or https://"
            case .noHost: "a receiver URL needs a host"
            case .credentials: "a receiver URL takes no user or password (they would not be sent; the signature tells the receiver it is SyncGate)"
            case .oddHost: "a receiver's host is a name of letters, digits, '-' and '.', or an IP address"
            case .unresolvable(let host): "the receiver's host \(host) does not resolve"
            case .privateAddress(let address):
                "the receiver resolves to \(address), a loopback, link-local or private address (allow with SYNCGATE_WEBHOOK_ALLOW_PRIVATE=true)"
            }
        }
    }

    /// Whether an IPv4 (4 bytes) or IPv6 (16 bytes) address is loopback, link-local, private,
    /// shared (CGNAT), unspecified, multicast or reserved: anything but a public unicast address.
    package static func isInternal(_ address: [UInt8]) -> Bool {
        switch address.count {
        case 4: return isInternalV4(address[0], address[1], address[2])
        case 16:
            // IPv4-mapped (::ffff:a.b.c.d) and IPv4-compatible addresses: judge the IPv4 address.
            if address[0..<10].allSatisfy({ $0 == 0 }), (address[10] == 0xFF && address[11] == 0xFF) || (address[10] == 0 && address[11] == 0) {
                if address[10] == 0, address[12..<16].allSatisfy({ $0 == 0 }) || address[12..<15].allSatisfy({ $0 == 0 }) {
                    return true  // :: and ::1
                }
                return isInternalV4(address[12], address[13], address[14])
            }
            let first = address[0]
            if first == 0xFF { return true }  // multicast
            if first & 0xFE == 0xFC { return true }  // fc00::/7 unique local
            if first == 0xFE && address[1] & 0xC0 == 0x80 { return true }  // fe80::/10 link-local
            if first == 0xFE && address[1] & 0xC0 == 0xC0 { return true }  // fec0::/10 site-local (deprecated)
            if first == 0x20, address[1] == 0x01, address[2] == 0x0D, address[3] == 0xB8 { return true }  // 2001:db8::/32 documentation
            if first == 0x00, address[1] == 0x64, address[2] == 0xFF, address[3] == 0x9B {
                // 64:ff9b::/96 NAT64: the IPv4 address in the last four bytes. The local-use
                // 64:ff9b:1::/48 may embed it elsewhere: refused unless it has the /96 form.
                guard address[4..<12].allSatisfy({ $0 == 0 }) else { return true }
                return isInternalV4(address[12], address[13], address[14])
            }
            if first == 0x20, address[1] == 0x02 { return isInternalV4(address[2], address[3], address[4]) }  // 2002::/16 6to4
            if first == 0x20, address[1] == 0x01, address[2] == 0x00, address[3] == 0x00 { return true }  // 2001::/32 Teredo tunnels
            return false
        default:
            return true
        }
    }

    static func isInternalV4(_ a: UInt8, _ b: UInt8, _ c: UInt8) -> Bool {
        switch a {
        case 0, 10, 127: return true  // this network, private, loopback
        case 100: return b & 0xC0 == 64  // 100.64.0.0/10 shared (CGNAT)
        case 169: return b == 254  // link-local, cloud metadata
        case 172: return b & 0xF0 == 16  // 172.16.0.0/12
        case 192: return b == 168 || (b == 0 && (c == 0 || c == 2))  // 192.168.0.0/16; 192.0.0.0/24 and 192.0.2.0/24
        case 198: return b & 0xFE == 18  // 198.18.0.0/15 benchmarking
        case 224...255: return true  // multicast, reserved, broadcast
        default: return false
        }
    }

    /// The scheme and host of a receiver URL, or why it is refused.
    package static func parse(_ url: String) -> Result<(secure: Bool, host: String, port: Int), Refusal> {
        let lower = url.lowercased()
        let secure: Bool
        if lower.hasPrefix("https://") { secure = true } else if lower.hasPrefix("http://") { secure = false } else { return .failure(.notHTTP) }
        let rest = url.dropFirst(secure ? 8 : 7)
        let authority = String(rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" })
        guard !authority.contains("@") else { return .failure(.credentials) }
        var host = authority
        var port = secure ? 443 : 80
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return .failure(.noHost) }
            host = String(authority[authority.index(after: authority.startIndex)..<close])
            let after = authority[authority.index(after: close)...]
            if after.hasPrefix(":") { guard let p = Int(after.dropFirst()), (1...65535).contains(p) else { return .failure(.noHost) }; port = p }
        } else if let colon = authority.lastIndex(of: ":") {
            host = String(authority[..<colon])
            guard let p = Int(authority[authority.index(after: colon)...]), (1...65535).contains(p) else { return .failure(.noHost) }
            port = p
        }
        guard !host.isEmpty else { return .failure(.noHost) }
        // Only what every parser reads alike (no percent-encoding, no other characters): the host
        // checked is the host connected to.
        let allowed: (Unicode.Scalar) -> Bool = authority.hasPrefix("[")
            ? { $0.properties.isASCIIHexDigit || $0 == ":" || $0 == "." }
            : { ($0.isASCII && ($0.properties.isAlphabetic || $0.properties.numericType != nil)) || $0 == "-" || $0 == "." }
        guard host.unicodeScalars.allSatisfy(allowed) else { return .failure(.oddHost) }
        return .success((secure, host, port))
    }
}
