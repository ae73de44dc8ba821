#!/usr/bin/env python3
"""The push side of scripts/bench-purge (a measurement, not a test).

    bench/purge-pushes.py BASE_URL TOKEN SYNCGATE_BINARY DATABASE_URL TOMBSTONES

Seeds TOMBSTONES tombstones in one user's feed (creates, then deletes, 1,000 operations a push),
then times `syncgate admin prune --tombstones-older-than 2s` while the same user pushes 1-op
creates back to back (10 ms apart): prints the prune's answer and wall time, and the push
latency before the prune and during it (and 1 s after). Bounded: at most 2,000 pushes of the
user, and the prune at most 300 s.
"""
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

base, token, binary, url, count = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
stamp = "2026-01-15T07:30:00.000Z"


def push(operations, device):
    request = urllib.request.Request(
        base + "/v1/sync/push?wait=30000", data=json.dumps({"operations": operations}).encode(), method="POST",
        headers={"Authorization": "Bearer " + token, "X-Device-Id": device, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise SystemExit(f"push answered {error.code}: {error.read()[:400]!r}")
    if body.get("status") != "done":
        raise SystemExit(f"push not done: {body}")


def create(key, entity):
    return {"idempotency_key": key, "entity_type": "weightLogs", "entity_id": entity, "intent": "create",
            "data": {"kg": 70, "date": "2026-01-15"}, "client_timestamp": stamp}


for start in range(0, count, 1000):
    push([create(f"c{i}", f"w{i}") for i in range(start, min(count, start + 1000))], "seeder")
for start in range(0, count, 1000):
    push([{"idempotency_key": f"d{i}", "entity_type": "weightLogs", "entity_id": f"w{i}", "intent": "delete",
           "base_version": 1, "client_timestamp": stamp} for i in range(start, min(count, start + 1000))], "seeder")
print(f"seeded {count} tombstones in one feed", flush=True)
time.sleep(3)  # older than the prune's 2 s

latencies = []
stop = threading.Event()


failures = []


def pushes():
    for index in range(2000):
        if stop.is_set():
            return
        started = time.monotonic()
        try:
            push([create(f"p{index}", f"p{index}")], "phone")
        except SystemExit as failure:  # recorded, and the user keeps pushing
            failures.append(f"{(time.monotonic() - started) * 1000:.0f} ms: {failure}")
            continue
        latencies.append((time.monotonic() - started) * 1000)
        time.sleep(0.01)


pusher = threading.Thread(target=pushes)
pusher.start()
time.sleep(1)
before = len(latencies)
started = time.monotonic()
pruned = subprocess.run([binary, "admin", "prune", "--database-url", url, "--tombstones-older-than", "2s"],
                        capture_output=True, text=True, timeout=300)
wall = (time.monotonic() - started) * 1000
time.sleep(1)
stop.set()
pusher.join()
during = sorted(latencies[before:])
print(f"prune: {pruned.stdout.strip()} (exit {pruned.returncode}, {wall:.0f} ms wall, the process's start included)")
print(f"the same user's 1-op pushes: before the prune {before}, max {max(latencies[:before]):.1f} ms; "
      f"during it and 1 s after {len(during)}, p50 {during[len(during) // 2]:.1f} ms, max {during[-1]:.1f} ms")
print(f"failed pushes: {len(failures)}" + "".join(f"\n  {failure}" for failure in failures[:5]))
