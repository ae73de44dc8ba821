import Foundation
import Yams

/// The OpenAPI document the front serves: `Resources/openapi.yaml`, and each plug-in's part
/// (``FrontPlugin/openAPI``) for the operations the router serves.
package enum OpenAPIDocument {
    /// The document's bytes without plug-ins: the file as written.
    package static var base: [UInt8] { PackageResources.openapi_yaml }

    static let methods: Set<String> = ["get", "put", "post", "delete", "patch", "head", "options", "trace"]

    /// `base` with each of `parts` merged in: mappings merge key by key, lists are concatenated.
    /// A part's operation whose method and path are not in `served` (`"GET /sync/full"`, path
    /// parameters as `:name` or `{name}`) is left out, a path left with none is dropped, and so
    /// is a tag of a part that no operation kept uses.
    package static func merged(base: String, parts: [String], served: Set<String>) throws -> String {
        guard var document = try Yams.compose(yaml: base)?.mapping else { throw OpenAPIError("the base document is not a YAML mapping") }
        let served = Set(served.map(normalized))
        for part in parts {
            guard var mapping = try Yams.compose(yaml: part)?.mapping else { throw OpenAPIError("a plug-in's OpenAPI part is not a YAML mapping") }
            var used: Set<String> = []
            if var paths = mapping["paths"]?.mapping {
                for (key, item) in paths {
                    guard let path = key.string, var operations = item.mapping else { throw OpenAPIError("a plug-in's path item is not a mapping") }
                    for method in operations.keys.compactMap(\.string) where methods.contains(method) {
                        if served.contains(normalized("\(method.uppercased()) \(path)")) {
                            for tag in operations[method]?.mapping?["tags"]?.sequence ?? [] {
                                if let name = tag.string { used.insert(name) }
                            }
                        } else {
                            operations[method] = nil
                        }
                    }
                    paths[key] = operations.keys.contains { $0.string.map(methods.contains) == true } ? .mapping(operations) : nil
                }
                mapping["paths"] = .mapping(paths)
            }
            if let tags = mapping["tags"]?.sequence {
                mapping["tags"] = .sequence(Node.Sequence(tags.filter { $0.mapping?["name"]?.string.map(used.contains) == true }))
            }
            document = merge(document, mapping)
        }
        // No line wrapping: descriptions keep their lines.
        return try Yams.serialize(node: .mapping(document), width: -1, allowUnicode: true, sortKeys: false)
    }

    /// The service API's webhook operations as the admin listener serves them: their paths
    /// under `/admin/v1/webhooks`, the admin key's security, and every component they refer to
    /// (copied from the public document, so the two never disagree).
    static func adminWebhooksPart() throws -> String {
        guard let document = try Yams.compose(yaml: String(decoding: base, as: UTF8.self))?.mapping,
            let paths = document["paths"]?.mapping, let components = document["components"]?.mapping
        else { throw OpenAPIError("the base document has no paths or components") }
        var kept: Node.Mapping = [:]
        for (key, item) in paths {
            guard let path = key.string, path.hasPrefix("/v1/service/webhooks"), var operations = item.mapping else { continue }
            for method in operations.keys.compactMap(\.string) where methods.contains(method) {
                guard var operation = operations[method]?.mapping else { continue }
                operation["security"] = .sequence([.mapping(["adminKey": .sequence([])])])
                operation["tags"] = .sequence(["webhooks"])
                if let id = operation["operationId"]?.string { operation["operationId"] = .scalar(.init("admin" + id.prefix(1).uppercased() + id.dropFirst())) }
                operations[method] = .mapping(operation)
            }
            kept[.scalar(.init("/admin/v1/webhooks" + path.dropFirst("/v1/service/webhooks".count)))] = .mapping(operations)
        }
        // The components the operations refer to, and those they refer to in turn.
        var copied: Node.Mapping = [:]
        var pending = try references(in: .mapping(kept))
        var seen: Set<String> = []
        while let reference = pending.popLast() {
            guard seen.insert(reference).inserted else { continue }
            let parts = reference.split(separator: "/").map(String.init)
            guard parts.count == 2, let node = components[parts[0]]?.mapping?[parts[1]] else { continue }
            var section: Node.Mapping = copied[parts[0]]?.mapping ?? [:]
            section[parts[1]] = node
            copied[parts[0]] = .mapping(section)
            pending += try references(in: node)
        }
        let part: Node.Mapping = [
            "tags": .sequence([.mapping(["name": "webhooks", "description": "Change webhook subscriptions (docs/webhooks.md), as the service API manages them."])]),
            "paths": .mapping(kept), "components": .mapping(copied),
        ]
        return try Yams.serialize(node: .mapping(part), width: -1, allowUnicode: true, sortKeys: false)
    }

    /// `section/name` of every `#/components/section/name` reference in `node`.
    static func references(in node: Node) throws -> [String] {
        let text = try Yams.serialize(node: node, width: -1)
        var found: [String] = []
        var rest = Substring(text)
        while let range = rest.range(of: "#/components/") {
            let tail = rest[range.upperBound...]
            let reference = tail.prefix { $0.isLetter || $0.isNumber || $0 == "/" || $0 == "_" }
            found.append(String(reference))
            rest = tail.dropFirst(reference.count)
        }
        return found
    }

    static func merge(_ base: Node.Mapping, _ part: Node.Mapping) -> Node.Mapping {
        var merged = base
        for (key, value) in part {
            switch (merged[key], value) {
            case (.mapping(let old)?, .mapping(let new)):
                merged[key] = .mapping(merge(old, new))
            case (.sequence(let old)?, .sequence(let new)):
                merged[key] = .sequence(Node.Sequence(Array(old) + Array(new)))
            default:
                merged[key] = value
            }
        }
        return merged
    }

    /// `GET /v1/jobs/:id` and `GET /v1/jobs/{job_id}` are one operation.
    static func normalized(_ operation: String) -> String {
        operation.split(separator: "/", omittingEmptySubsequences: false)
            .map { $0.hasPrefix(":") || $0.hasPrefix("{") ? "{}" : String($0) }.joined(separator: "/")
    }
}

package struct OpenAPIError: Error, CustomStringConvertible {
    package let description: String

    init(_ description: String) {
        self.description = description
    }
}
