#!/usr/bin/env python3
"""Two HTTP-layer fault measurements against a real `stepwise serve` (standard library only).

  slow-readers: a session with a long history (default 200 messages of 64 KiB), the server
      restarted, then N connections to GET /v1/sessions/{id}/events that never read (4 KiB
      receive buffer). Reports the server's RSS before, its peak while the streams are open,
      and after they close.
  stalled: N connections that send half a request line and stall, then a normal request
      (GET /healthz, a new connection each time) timed K times while they are open.

    cargo build --release -p stepwise
    python3 tests/faults/http_load.py slow-readers --binary target/release/stepwise
    python3 tests/faults/http_load.py stalled --binary target/release/stepwise

Prints one JSON object. Uses a temporary directory and a free loopback port.
"""

import argparse
import http.client
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time


def rss_kib(pid, field="VmRSS"):
    """Resident memory in KiB (VmRSS; RssAnon is the part not backed by files, e.g. not
    SQLite's memory-mapped database pages)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class Server:
    def __init__(self, binary, db, extra=(), nofile=None):
        env = dict(os.environ)
        env.update({"STEPWISE_LOG": "warn", "STEPWISE_DEMO_STEP_MS": "0"})
        for key in ("STEPWISE_LISTEN", "STEPWISE_DATABASE_URL", "STEPWISE_CONFIG"):
            env.pop(key, None)
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--database", f"sqlite://{db}",
             "--rate-limit-per-sec", "0", "--max-sse-per-tenant", "0", *extra],
            stdout=subprocess.PIPE, env=env, text=True,
            preexec_fn=(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)))
            if nofile else None)
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit("the server exited before listening")
            if line.startswith("Stepwise listening on http://"):
                host, port = line.strip().rsplit("/", 1)[-1].rsplit(":", 1)
                self.host, self.port = host, int(port)
                return
        raise SystemExit("the server did not start")

    def request(self, method, path, body=None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, None if body is None else json.dumps(body), headers)
        response = conn.getresponse()
        data = response.read()
        conn.close()
        return response.status, (json.loads(data) if data.startswith(b"{") else data)

    def metric(self, name):
        _, text = self.request("GET", "/metrics")
        for line in text.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def rss(self, field="VmRSS"):
        return rss_kib(self.proc.pid, field)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def slow_readers(args):
    tmp = tempfile.mkdtemp(prefix="stepwise-faults-")
    db = os.path.join(tmp, "slow.db")
    server = Server(args.binary, db)
    status, session = server.request("POST", "/v1/sessions", {"title": "long history"})
    assert status == 201, session
    sid = session["id"]
    content = "x" * args.size
    for _ in range(args.messages):
        status, answer = server.request("POST", f"/v1/sessions/{sid}/messages", {"content": content})
        assert status == 202, answer
    deadline = time.time() + 300
    while time.time() < deadline:
        _, executions = server.request("GET", f"/v1/sessions/{sid}/executions?limit=500")
        if all(e["status"] in ("completed", "failed", "cancelled") for e in executions["items"]):
            break
        time.sleep(0.2)
    server.stop()
    db_bytes = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp))

    server = Server(args.binary, db)
    server.request("GET", "/healthz")
    time.sleep(1)
    baseline = server.rss()
    baseline_anon = server.rss("RssAnon")
    socks = []
    request = (f"GET /v1/sessions/{sid}/events HTTP/1.1\r\nHost: {server.host}\r\n"
               "Accept: text/event-stream\r\n\r\n").encode()
    for _ in range(args.clients):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((server.host, server.port))
        s.sendall(request)
        socks.append(s)
    peak = baseline
    peak_anon = server.rss("RssAnon")
    end = time.time() + args.hold
    while time.time() < end:
        peak = max(peak, server.rss())
        peak_anon = max(peak_anon, server.rss("RssAnon"))
        time.sleep(0.05)
    held = server.rss()
    streams = server.metric("stepwise_sse_subscribers")
    for s in socks:
        s.close()
    deadline = time.time() + 30
    while time.time() < deadline and server.metric("stepwise_sse_subscribers"):
        peak = max(peak, server.rss())
        time.sleep(0.1)
    time.sleep(args.settle)
    after = server.rss()
    after_anon = server.rss("RssAnon")
    server.stop()
    print(json.dumps({
        "measure": "slow-readers",
        "messages": args.messages, "message_bytes": args.size, "clients": args.clients,
        "database_bytes": db_bytes, "open_streams": streams,
        "rss_baseline_mib": round(baseline / 1024, 1), "rss_peak_mib": round(peak / 1024, 1),
        "rss_while_open_mib": round(held / 1024, 1), "rss_after_close_mib": round(after / 1024, 1),
        "rss_anon_baseline_mib": round(baseline_anon / 1024, 1),
        "rss_anon_peak_mib": round(peak_anon / 1024, 1),
        "rss_anon_after_close_mib": round(after_anon / 1024, 1),
    }))


def stalled(args):
    tmp = tempfile.mkdtemp(prefix="stepwise-faults-")
    server = Server(args.binary, os.path.join(tmp, "stalled.db"), args.serve_arg, args.nofile)
    socks = []
    for _ in range(args.connections):
        s = socket.create_connection((server.host, server.port))
        s.sendall(b"GET /healthz HT")
        socks.append(s)
    # Let the server accept them all (its count of open connections stops moving).
    previous, deadline = -1, time.time() + 30
    while time.time() < deadline:
        held = server.metric("stepwise_http_connections")
        if held == previous:
            break
        previous = held
        time.sleep(0.2)
    latencies = []
    for _ in range(args.requests):
        start = time.perf_counter()
        conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        response.read()
        conn.close()
        latencies.append((time.perf_counter() - start) * 1000)
        assert response.status == 200, response.status
    server_open = server.metric("stepwise_http_connections")
    evicted = server.metric("stepwise_http_connections_evicted_total")
    stalled_open = sum(1 for s in socks if still_open(s))
    for s in socks:
        s.close()
    server.stop()
    latencies.sort()
    print(json.dumps({
        "measure": "stalled", "stalled_connections": args.connections,
        "nofile_limit": args.nofile, "server_open_connections": server_open,
        "evicted": evicted, "stalled_still_open_after": stalled_open, "requests": args.requests,
        "latency_ms_median": round(latencies[len(latencies) // 2], 2),
        "latency_ms_p99": round(latencies[int(len(latencies) * 0.99) - 1], 2),
        "latency_ms_max": round(latencies[-1], 2),
    }))


def still_open(s):
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="measure", required=True)
    p = sub.add_parser("slow-readers")
    p.add_argument("--binary", required=True)
    p.add_argument("--messages", type=int, default=200)
    p.add_argument("--size", type=int, default=64 * 1024)
    p.add_argument("--clients", type=int, default=150)
    p.add_argument("--hold", type=float, default=10.0, help="seconds the streams stay open")
    p.add_argument("--settle", type=float, default=3.0, help="seconds after they close")
    p = sub.add_parser("stalled")
    p.add_argument("--binary", required=True)
    p.add_argument("--connections", type=int, default=1100)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--serve-arg", action="append", default=[], help="extra `serve` argument")
    p.add_argument("--nofile", type=int, help="the server's open-file limit (as `ulimit -n`)")
    args = parser.parse_args()
    {"slow-readers": slow_readers, "stalled": stalled}[args.measure](args)


if __name__ == "__main__":
    sys.exit(main())
