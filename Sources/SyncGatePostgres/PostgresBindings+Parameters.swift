import PostgresNIO

/// A value a prepared statement binds; `nil` binds NULL. PostgresBindings overloads `append` on
/// optionality, which a parameter pack cannot choose between; a protocol of our own can.
protocol StatementParameter {
    func bind(to bindings: inout PostgresBindings)
}

extension StatementParameter where Self: PostgresDynamicTypeEncodable {
    func bind(to bindings: inout PostgresBindings) { bindings.append(self) }
}

extension String: StatementParameter {}
extension Int64: StatementParameter {}
extension Bool: StatementParameter {}
extension Array: StatementParameter where Element: PostgresArrayEncodable & PostgresNonThrowingEncodable {}

extension Optional: StatementParameter where Wrapped: StatementParameter {
    func bind(to bindings: inout PostgresBindings) {
        if let self { self.bind(to: &bindings) } else { bindings.appendNull() }
    }
}

extension PostgresBindings {
    /// `$1`, `$2`, … in the order given.
    init<each Parameter: StatementParameter>(_ parameter: repeat each Parameter) {
        var count = 0
        for _ in repeat each parameter { count += 1 }
        self.init(capacity: count)
        repeat (each parameter).bind(to: &self)
    }
}
