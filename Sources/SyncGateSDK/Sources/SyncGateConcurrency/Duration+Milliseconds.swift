extension Duration {
    /// Whole milliseconds, rounded toward zero: what settings, leases and SQL bounds count in.
    public var wholeMilliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }

    /// Seconds with their fraction, as `TimeInterval`s and `Double` arithmetic count them.
    public var timeInterval: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
