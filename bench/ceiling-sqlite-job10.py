#!/usr/bin/env python3
"""The row work of one 10-operation push on SyncGate's SQLite schema (WAL), as one process does it
back to back: a durable enqueue, a claim, and one apply transaction (feed, load, entities,
changes, idempotency records, job result, device watermark, feed head). The embedded server's
reference, as bench/ceiling-job10.sql is PostgreSQL's (scripts/bench runs both); Python's own
overhead is in the number, so the true limit is somewhat higher.

usage: bench/ceiling-sqlite-job10.py DATABASE SECONDS [FULL|NORMAL]
DATABASE is a file `syncgate migrate --database-url sqlite:DATABASE` made."""
import json, random, sqlite3, sys, time

path, seconds = sys.argv[1], float(sys.argv[2])
sync = sys.argv[3] if len(sys.argv) > 3 else "FULL"
db = sqlite3.connect(path, isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute(f"PRAGMA synchronous={sync}")
now = lambda: int(time.time() * 1000)
jobs = 0
started = time.time()
end = started + seconds
while time.time() < end:
    u = f"u{random.randrange(20000)}"
    r = random.randrange(1 << 30)
    n = now()
    db.execute("BEGIN IMMEDIATE")
    job = db.execute(
        "INSERT INTO jobs (user_id, device_id, max_attempts, run_at, operation_count, payload, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?)",
        (u, "d", 5, n, 10, "x" * 1400, n, n),
    ).lastrowid
    db.execute("COMMIT")
    db.execute("BEGIN IMMEDIATE")
    db.execute(
        "UPDATE jobs SET state='running', attempts=attempts+1, lease_owner='w', lease_token=?, lease_expires_at=?, updated_at=? WHERE id=?",
        (str(r), n + 30000, n, job),
    )
    db.execute("COMMIT")
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO feeds (scope) VALUES (?) ON CONFLICT DO NOTHING", ("u:" + u,))
    head = db.execute("SELECT head FROM feeds WHERE scope=?", ("u:" + u,)).fetchone()[0]
    ids = [f"e{r}_{g}" for g in range(10)]
    db.execute(
        f"SELECT entity_id FROM entities WHERE scope=? AND entity_type='contacts' AND entity_id IN ({','.join('?' * 10)})", ["u:" + u] + ids
    ).fetchall()
    doc = json.dumps({"name": "n", "note": "y" * 80})
    db.executemany(
        "INSERT INTO entities (scope, entity_type, entity_id, version, data, meta, client_ts, updated_at) VALUES (?,?,?,?,?,?,?,?) "
        "ON CONFLICT DO UPDATE SET version=excluded.version, data=excluded.data",
        [("u:" + u, "contacts", i, 1, doc, None, 0, n) for i in ids],
    )
    db.executemany(
        "INSERT INTO changes (scope, seq, entity_type, entity_id, version, data, updated_at) VALUES (?,?,?,?,?,?,?)",
        [("u:" + u, head + k + 1, "contacts", i, 1, doc, n) for k, i in enumerate(ids)],
    )
    db.executemany(
        "INSERT INTO applied_operations (user_id, idempotency_key, version, applied_at) VALUES (?,?,?,?)",
        [(u, f"k{r}_{g}", 1, n) for g in range(10)],
    )
    db.execute(
        "UPDATE jobs SET state='done', results=?, finished_at=?, lease_owner=NULL, lease_token=NULL, lease_expires_at=NULL, updated_at=? WHERE id=?",
        ("r" * 600, n, n, job),
    )
    db.execute(
        "INSERT INTO devices (user_id, device_id, last_finished_job_id, updated_at) VALUES (?,?,?,?) "
        "ON CONFLICT DO UPDATE SET last_finished_job_id=excluded.last_finished_job_id",
        (u, "d", job, n),
    )
    db.execute("UPDATE feeds SET head=? WHERE scope=?", (head + 10, "u:" + u))
    db.execute("COMMIT")
    jobs += 1
elapsed = time.time() - started
print(f"{10 * jobs / elapsed:.0f}")
