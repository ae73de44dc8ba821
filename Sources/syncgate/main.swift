import SyncGateStorage; print("hi")
