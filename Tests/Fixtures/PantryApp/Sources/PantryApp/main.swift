import Foundation
import SyncGateClient

print("placeholder")
