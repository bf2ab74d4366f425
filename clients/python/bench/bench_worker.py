"""Workers (docs/workers.md) measured from outside, against one `stepwise serve`:

- **start latency**: a worker waits in `POST /v1/workers/claim`; a message for its agent type is
  posted; the time until the claim answers with it (the server announces `execution.started` as
  it hands the claim out), and the same from the server's own clocks (the user message's
  `created_at` to the `execution.started` event's `timestamp`). `--rounds` messages, one at a
  time; p50 and p99.
- **throughput**: `--executions` one-step executions (each message in its own session) through a
  Python `stepwise.worker.Worker` (`--concurrency`, default 16) whose agent saves one step and
  answers, the same agent with its step marked `last=True` (sent with the completion, one
  request), beside the same number through the built-in demo agent (`hi`: one step, then
  `Echo: hi`), on the same server; executions per second from the first post to the last
  completion. `--repeat N` alternates the three batches N times and gives medians; beside the
  rates, each execution's CPU milliseconds in the server and in the worker process (less
  disturbed by other load on the machine than the rates), the worker's requests per
  execution by route and the server's mean time per request by route (a claim's includes the
  wait of its long poll).
- **idle cost**: a `Worker` with nothing to do for `--idle-s` seconds: its requests (the
  server's `stepwise_http_requests_total`) and the server process's CPU seconds in that time.

    pip install ./clients/python
    python clients/python/bench/bench_worker.py --stepwise-bin target/release/stepwise
    python clients/python/bench/bench_worker.py --stepwise-bin target/release/stepwise --parts throughput --repeat 5

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from stepwise import Stepwise
from stepwise.testing import local_server
from stepwise.worker import Worker

AGENT = "bench-echo"
AGENT_LAST = "bench-echo-last"  # the same agent, its step sent with the completion


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def ms(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(values, 0.5) * 1000, 3), "p99_ms": round(percentile(values, 0.99) * 1000, 3)}


def parse_ts(text: str) -> float:
    """RFC 3339 with microseconds to seconds."""
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def start_latency(url: str, rounds: int) -> dict[str, Any]:
    """A raw claim waits; a message is posted; the claim's answer is timed."""
    claim_body = {"worker_id": "bench-latency", "agents": [{"type": AGENT}], "slots": 1, "wait_s": 20}
    client_side: list[float] = []
    server_side: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as waiter, httpx.Client(base_url=url, timeout=30) as poster:
        for n in range(rounds):
            answer: dict[str, Any] = {}

            def wait() -> None:
                answer["claim"] = waiter.post("/v1/workers/claim", json=claim_body).json()
                answer["at"] = time.perf_counter()

            thread = threading.Thread(target=wait)
            thread.start()
            time.sleep(0.02)  # the claim is waiting
            t0 = time.perf_counter()
            posted = poster.post("/v1/messages", json={"content": f"m{n}", "agent": {"type": AGENT}}).json()
            thread.join()
            claim = answer["claim"]["items"][0]
            client_side.append(answer["at"] - t0)
            lease = {"Stepwise-Lease": claim["lease"]}
            execution = claim["execution"]["id"]
            poster.post(f"/v1/executions/{execution}/complete", json={"output": "ok"}, headers=lease).raise_for_status()
            started = None
            with poster.stream("GET", f"/v1/sessions/{posted['session_id']}/events",
                               headers={"accept": "text/event-stream", "last-event-id": "0"}) as events:
                for line in events.iter_lines():
                    if line.startswith("data:"):
                        event = json.loads(line[5:])
                        if event.get("event_type") == "execution.started":
                            started = parse_ts(event["timestamp"])
                            break
            if started is not None:
                server_side.append(started - parse_ts(posted["message"]["created_at"]))
    return {"rounds": rounds, "claim_answered_after_post": ms(client_side), "message_to_started_server_clock": ms(server_side)}


def run_batch(client: Stepwise, executions: int, agent: str | None, pool: ThreadPoolExecutor) -> float:
    """Posts `executions` messages (each a new session) and waits for all: executions/s."""
    http = httpx.Client(base_url=client.base_url, timeout=60, limits=httpx.Limits(max_connections=32))

    def post(n: int) -> str:
        body: dict[str, Any] = {"content": "hi", "session": {"title": f"bench-{agent}-{n}"}}
        if agent:
            body["agent"] = {"type": agent}
        response = http.post("/v1/messages", json=body)
        response.raise_for_status()
        return response.json()["execution"]["id"]

    t0 = time.perf_counter()
    ids = list(pool.map(post, range(executions)))
    for execution in ids:
        done = client.wait(execution, timeout=300)
        assert done["status"] == "completed", done
    return executions / (time.perf_counter() - t0)


def throughput(url: str, executions: int, concurrency: int, server_pid: int | None, repeat: int = 1) -> dict[str, Any]:
    """The worker runs in a process of its own (`worker_echo.py`), as a deployment runs it.
    The demo agent's batch and the worker's alternate `repeat` times; beside the rates come
    the CPU milliseconds each execution cost the server (and the worker process), a figure
    that other load on the machine disturbs less than the rates, and the worker's requests
    per execution and the server's mean milliseconds per request, by route (the bench's own
    posts and waits left out)."""
    env = {**os.environ, "STEPWISE_URL": url, "STEPWISE_BENCH_CONCURRENCY": str(concurrency),
           "PYTHONPATH": str(Path(__file__).resolve().parent)}
    process = subprocess.Popen([sys.executable, "-m", "stepwise.worker", "worker_echo:worker"], env=env)
    rounds: list[dict[str, Any]] = []
    worker_routes: dict[str, dict[str, float]] = {AGENT: {}, AGENT_LAST: {}}
    worker_seconds: dict[str, dict[str, list[float]]] = {AGENT: {}, AGENT_LAST: {}}

    def measured(client: Stepwise, agent: str | None, pool: ThreadPoolExecutor) -> dict[str, float]:
        server_cpu = cpu_seconds(server_pid) if server_pid else None
        worker_cpu = cpu_seconds(process.pid)
        routes = requests_by_route(url)
        seconds = request_seconds_by_route(url)
        rate = run_batch(client, executions, agent, pool)
        figures = {"per_s": rate,
                   "server_cpu_ms": (cpu_seconds(server_pid) - server_cpu) * 1000 / executions if server_pid else None,
                   "worker_cpu_ms": (cpu_seconds(process.pid) - worker_cpu) * 1000 / executions}
        if agent:
            for route, total in requests_by_route(url).items():
                delta = total - routes.get(route, 0.0)
                if delta and route not in BENCH_ROUTES:
                    worker_routes[agent][route] = worker_routes[agent].get(route, 0.0) + delta
            for route, (total, count) in request_seconds_by_route(url).items():
                before = seconds.get(route, (0.0, 0.0))
                if count > before[1] and route not in BENCH_ROUTES:
                    spent = worker_seconds[agent].setdefault(route, [0.0, 0.0])
                    spent[0] += total - before[0]
                    spent[1] += count - before[1]
        return figures

    try:
        with Stepwise(url) as client, ThreadPoolExecutor(16) as pool:
            deadline = time.monotonic() + 60
            def online() -> bool:
                return any(a["type"] == AGENT and a["workers_online"] for a in client.list_agents()["items"])

            while not online():
                assert time.monotonic() < deadline, "the worker did not connect"
                time.sleep(0.2)
            run_batch(client, 20, None, pool)  # warm up the paths
            run_batch(client, 20, AGENT, pool)
            run_batch(client, 20, AGENT_LAST, pool)
            for _ in range(repeat):
                demo = measured(client, None, pool)
                workers = measured(client, AGENT, pool)
                last = measured(client, AGENT_LAST, pool)
                rounds.append({"demo": demo, "worker": workers, "last": last,
                               "ratio": workers["per_s"] / demo["per_s"],
                               "ratio_last": last["per_s"] / demo["per_s"]})
    finally:
        process.terminate()
        process.wait(30)

    def median(key: str, side: str | None = None) -> float | None:
        values = [r[key] if side is None else r[side][key] for r in rounds]
        if any(v is None for v in values):
            return None
        return round(statistics.median(values), 2)

    result: dict[str, Any] = {
        "executions": executions,
        "worker_concurrency": concurrency,
        "demo_per_s": median("per_s", "demo"),
        "python_worker_per_s": median("per_s", "worker"),
        "ratio": median("ratio"),
        "python_worker_last_step_per_s": median("per_s", "last"),
        "ratio_last_step": median("ratio_last"),
        "server_cpu_ms_per_execution": {"demo": median("server_cpu_ms", "demo"),
                                        "worker": median("server_cpu_ms", "worker"),
                                        "worker_last_step": median("server_cpu_ms", "last")},
        "worker_process_cpu_ms_per_execution": {"worker": median("worker_cpu_ms", "worker"),
                                                "worker_last_step": median("worker_cpu_ms", "last")},
        "worker_requests_per_execution": {
            side: {route: round(count / (executions * len(rounds)), 2) for route, count in sorted(routes.items())}
            for side, routes in (("worker", worker_routes[AGENT]), ("worker_last_step", worker_routes[AGENT_LAST]))
        },
        # The server's mean time per request (a claim's includes its long poll's wait).
        "worker_request_ms_by_route": {
            side: {route: round(total * 1000 / count, 2) for route, (total, count) in sorted(spent.items())}
            for side, spent in (("worker", worker_seconds[AGENT]), ("worker_last_step", worker_seconds[AGENT_LAST]))
        },
    }
    if repeat > 1:
        result["rounds"] = [
            {"demo_per_s": round(r["demo"]["per_s"], 1), "python_worker_per_s": round(r["worker"]["per_s"], 1),
             "python_worker_last_step_per_s": round(r["last"]["per_s"], 1),
             "ratio": round(r["ratio"], 2), "ratio_last_step": round(r["ratio_last"], 2)}
            for r in rounds
        ]
    return result


# The bench's own requests (its posts, its waits, the metrics it reads), not the worker's.
BENCH_ROUTES = frozenset({"POST /v1/messages", "GET /v1/executions/{id}", "GET /metrics", "GET /v1/agents"})


def requests_by_route(url: str) -> dict[str, float]:
    """The server's `stepwise_http_requests_total`, summed by method and route."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    pattern = r'^stepwise_http_requests_total\{method="([^"]*)",route="([^"]*)",status="[^"]*"\} (\S+)$'
    for m in re.finditer(pattern, text, re.M):
        key = f"{m.group(1)} {m.group(2)}"
        out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def request_seconds_by_route(url: str) -> dict[str, tuple[float, float]]:
    """The server's `stepwise_http_request_duration_seconds` by method and route: (seconds
    spent, requests)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out: dict[str, list[float]] = {}
    pattern = r'^stepwise_http_request_duration_seconds_(sum|count)\{method="([^"]*)",route="([^"]*)"\} (\S+)$'
    for m in re.finditer(pattern, text, re.M):
        pair = out.setdefault(f"{m.group(2)} {m.group(3)}", [0.0, 0.0])
        pair[0 if m.group(1) == "sum" else 1] += float(m.group(4))
    return {route: (pair[0], pair[1]) for route, pair in out.items()}


def requests_total(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(m.group(1)) for m in re.finditer(r"^stepwise_http_requests_total\{[^}]*\} (\S+)$", text, re.M))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cost(url: str, pid: int | None, seconds: float) -> dict[str, Any]:
    worker = Worker(Stepwise(url), concurrency=4)

    @worker.agent("bench-idle")
    def idle(run):  # noqa: ANN001, ANN202
        return None

    with worker:
        time.sleep(2)  # connected and waiting
        before_requests = requests_total(url)
        before_cpu = cpu_seconds(pid) if pid else None
        time.sleep(seconds)
        requests = requests_total(url) - before_requests - 1  # less this scrape
        cpu = cpu_seconds(pid) - before_cpu if pid and before_cpu is not None else None
    return {
        "seconds": seconds,
        "requests": requests,
        "requests_per_25_s": round(requests / seconds * 25, 2),
        "server_cpu_s": None if cpu is None else round(cpu, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stepwise-bin", default=os.environ.get("STEPWISE_BIN"), help="the stepwise binary to start (default $STEPWISE_BIN)")
    parser.add_argument("--rounds", type=int, default=200, help="messages for the start latency (default 200)")
    parser.add_argument("--executions", type=int, default=500, help="executions per system for the throughput (default 500)")
    parser.add_argument("--concurrency", type=int, default=16, help="the Python worker's concurrency (default 16)")
    parser.add_argument("--idle-s", type=float, default=60.0, help="seconds of idle worker (default 60)")
    parser.add_argument("--database", default=None, help="the server's database URL (default: a temporary SQLite file)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="throughput: demo and worker batches alternate this many times; medians (default 1)")
    parser.add_argument("--parts", default="start_latency,throughput,idle_worker",
                        help="which measures to run, comma-separated (default: all three)")
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    unknown = parts - {"start_latency", "throughput", "idle_worker"}
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")

    with local_server(binary=args.stepwise_bin, database=args.database, args=["--workers", "16"]) as server:
        pid = server.pid
        result: dict[str, Any] = {
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "database": (args.database or "sqlite (temporary file)").split("@")[-1],
        }
        if "start_latency" in parts:
            result["start_latency"] = start_latency(server.url, args.rounds)
        if "throughput" in parts:
            result["throughput"] = throughput(server.url, args.executions, args.concurrency, pid, args.repeat)
        if "idle_worker" in parts:
            result["idle_worker"] = idle_cost(server.url, pid, args.idle_s)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
