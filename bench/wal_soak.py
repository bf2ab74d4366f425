#!/usr/bin/env python3
"""WAL size under steady writes: a release `stepwise serve` on a fresh SQLite database,
CLIENTS clients posting steps of ~4 KB to external executions as fast as they are answered
for SECONDS, then idle for IDLE seconds. Prints one JSON line: steps written, the largest
`-wal` file seen (sampled every 50 ms), its size when writing stopped and after the idle
pause, and the database size.

    python3 bench/wal_soak.py [--binary target/release/stepwise] [--seconds 40]
        [--clients 1] [--idle 12] [--durability full] [--wal-limit-mb 64]

Loopback only; the server and its temporary database are removed at the end.
"""

import argparse
import http.client
import json
import os
import random
import string
import subprocess
import tempfile
import threading
import time


def request(port, method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    return resp.status, (json.loads(payload) if payload else None)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="target/release/stepwise")
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--idle", type=float, default=12)  # the server truncates an idle WAL after 10 s
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--durability", default="full")
    parser.add_argument("--wal-limit-mb", type=int, default=64)
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="stepwise-wal-soak-")
    db = os.path.join(work, "stepwise.db")
    wal = db + "-wal"
    server = subprocess.Popen(
        [args.binary, "serve", "--listen", "127.0.0.1:0", "--database", "sqlite://" + db,
         "--durability", args.durability, "--wal-limit-mb", str(args.wal_limit_mb),
         "--rate-limit-per-sec", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("STEPWISE_")},
    )
    port = None
    for line in server.stdout:
        if line.startswith("Stepwise listening on http://"):
            port = int(line.strip().rsplit(":", 1)[1])
            break
    if port is None:
        raise SystemExit("the server did not start")
    threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()

    size = lambda p: os.path.getsize(p) if os.path.exists(p) else 0
    largest = [0]
    sampling = [True]

    def sample():
        while sampling[0]:
            largest[0] = max(largest[0], size(wal))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    counts = [0] * args.clients
    stop_at = time.monotonic() + args.seconds

    def client(i):
        rng = random.Random(i)
        _, session = request(port, "POST", "/v1/sessions", {})
        _, execution = request(port, "POST", f"/v1/sessions/{session['id']}/executions",
                               {"agent_type": "external", "input": {}})
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            text = "".join(rng.choices(string.ascii_letters + string.digits, k=4096))
            body = json.dumps({"step_number": n, "kind": "action", "model_output": text})
            conn.request("POST", f"/v1/executions/{execution['id']}/steps", body=body,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 201:
                raise SystemExit(f"step {n}: HTTP {resp.status}")
            counts[i] = n

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wal_at_end = size(wal)
    time.sleep(args.idle)
    sampling[0] = False
    sampler.join()
    report = {
        "clients": args.clients,
        "seconds": args.seconds,
        "durability": args.durability,
        "wal_limit_mb": args.wal_limit_mb,
        "steps": sum(counts),
        "steps_per_s": round(sum(counts) / args.seconds, 1),
        "wal_max_bytes": largest[0],
        "wal_bytes_when_writes_stopped": wal_at_end,
        "wal_bytes_after_idle": size(wal),
        "idle_s": args.idle,
        "database_bytes": size(db),
    }
    server.terminate()
    server.wait(timeout=20)
    for name in os.listdir(work):
        os.remove(os.path.join(work, name))
    os.rmdir(work)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
