import SyncGateCore; public enum Placeholder2 {}
