"""Google ADK sessions: `StepwiseSessionService` beside ADK's own `DatabaseSessionService`.

The workload, the same for both, in one process on one machine:

- append: one session, `append_event` of 1,000 events (~2 KB each: a user or model text, a
  function call or a function response, with a small state delta on every fifth), each
  awaited before the next; per-call latency (p50, p99) and events per second;
- get: `get_session` of that 1,000-event session, `--loads` times: cold, each by a new
  service instance that never read it (for Stepwise `cache_events=False`: a restore in a new
  process), and warm, by one instance that read it before (Stepwise's event cache then asks
  the server for the version and latest event only); the medians.

Stepwise runs against a `stepwise serve` started for the run (`--stepwise-bin`, default
$STEPWISE_BIN, on a fresh SQLite database in a temporary directory) or at `--url`. The peer is
`DatabaseSessionService("sqlite+aiosqlite:///<tmp>/adk.db")` (SQLite's defaults). Rounds
alternate the two systems (`--rounds`); the medians of the rounds are printed as JSON.

    pip install "stepwise-client[adk]" "sqlalchemy[asyncio]>=2,<3"
    python clients/python/bench/bench_adk.py --stepwise-bin target/release/stepwise --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.genai import types

from stepwise.adk import StepwiseSessionService
from stepwise.testing import local_server

SEED = 20240611
WORDS = [
    "".join(random.Random(f"{SEED}:{i}").choice("aeiou" if j % 2 else "bcdfgklmnprstvz") for j in range(2 + i % 7))
    for i in range(800)
]
TOOLS = ["search_docs", "read_file", "run_shell", "http_get", "write_file", "grep_repo"]


def text(rng: random.Random, chars: int) -> str:
    out, total = [], 0
    while total < chars:
        word = rng.choice(WORDS)
        out.append(word)
        total += len(word) + 1
    return " ".join(out)[:chars]


def make_event(n: int, base: float) -> Event:
    """Event `n` of the session (deterministic), about 2 KB as JSON."""
    rng = random.Random(f"{SEED}:event:{n}")
    kind = n % 4
    if kind == 0:
        author, part = "user", types.Part.from_text(text=text(rng, 1800))
    elif kind == 1:
        author = "agent"
        part = types.Part.from_function_call(
            name=rng.choice(TOOLS), args={"query": text(rng, 900), "path": text(rng, 80), "limit": rng.randint(1, 50)}
        )
    elif kind == 2:
        author = "agent"
        part = types.Part.from_function_response(
            name=rng.choice(TOOLS), response={"result": text(rng, 1600), "ok": True}
        )
    else:
        author, part = "agent", types.Part.from_text(text=text(rng, 1800))
    delta = {"step": n, "last_tool": rng.choice(TOOLS)} if n % 5 == 0 else {}
    return Event(
        invocation_id=f"inv-{n // 4}",
        author=author,
        timestamp=base + n * 0.001,
        content=types.Content(role="user" if author == "user" else "model", parts=[part]),
        actions=EventActions(state_delta=delta),
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


async def run_system(make: Callable[..., BaseSessionService], events: int, loads: int, app: str) -> dict[str, Any]:
    """`make(cold=...)` makes a service; cold: one that has never read the session (for
    Stepwise, no event cache: as a new process would be)."""
    service = make(cold=False)
    session = await service.create_session(app_name=app, user_id="bench-user", state={"started": True})
    base = time.time()
    latencies = []
    start = time.perf_counter()
    for n in range(events):
        event = make_event(n, base)
        t0 = time.perf_counter()
        await service.append_event(session, event)
        latencies.append((time.perf_counter() - t0) * 1000)
    total = time.perf_counter() - start
    await service.close()  # type: ignore[attr-defined]

    async def load(reader: BaseSessionService) -> float:
        t0 = time.perf_counter()
        got = await reader.get_session(app_name=app, user_id="bench-user", session_id=session.id)
        elapsed = (time.perf_counter() - t0) * 1000
        assert got is not None and len(got.events) == events, "the session did not come back whole"
        return elapsed

    cold_ms = []
    for _ in range(loads):
        reader = make(cold=True)
        if isinstance(reader, DatabaseSessionService):
            await reader.prepare_tables()  # its one-time setup is not part of the read
        cold_ms.append(await load(reader))
        await reader.close()  # type: ignore[attr-defined]
    reader = make(cold=False)
    await load(reader)  # the first read of this process
    warm_ms = [await load(reader) for _ in range(loads)]
    await reader.close()  # type: ignore[attr-defined]
    return {
        "append_per_s": events / total,
        "append_p50_ms": percentile(latencies, 50),
        "append_p99_ms": percentile(latencies, 99),
        "get_session_cold_ms": statistics.median(cold_ms),
        "get_session_warm_ms": statistics.median(warm_ms),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--loads", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", help="a running stepwise serve (default: start one)")
    parser.add_argument("--api-key", default=os.environ.get("STEPWISE_API_KEY"))
    parser.add_argument("--stepwise-bin", default=os.environ.get("STEPWISE_BIN"))
    parser.add_argument("--server-arg", action="append", default=[],
                        help="an extra `stepwise serve` flag for the server this starts (repeat it), "
                             "e.g. --server-arg=--durability --server-arg=process")
    parser.add_argument("--data-dir", help="where both databases go (default: a new temporary directory)")
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-adk-", dir=args.data_dir))
    server_cm = None
    url = args.url
    binary = None
    if url is None:
        if args.stepwise_bin:
            os.environ["STEPWISE_BIN"] = args.stepwise_bin
        server_cm = local_server(database=f"sqlite://{tmp / 'stepwise.db'}", args=args.server_arg)
        server = server_cm.__enter__()
        url, binary = server.url, server.binary

    rounds: dict[str, list[dict[str, Any]]] = {"stepwise": [], "database_sqlite": []}
    try:
        for r in range(args.rounds):
            db_url = f"sqlite+aiosqlite:///{tmp / f'adk-{r}.db'}"
            order = ["stepwise", "database_sqlite"] if r % 2 == 0 else ["database_sqlite", "stepwise"]
            for system in order:
                if system == "stepwise":
                    result = asyncio.run(run_system(
                        lambda cold: StepwiseSessionService(base_url=url, api_key=args.api_key, cache_events=not cold),
                        args.events, args.loads, f"bench-{r}",
                    ))
                else:
                    result = asyncio.run(run_system(
                        lambda cold, db_url=db_url: DatabaseSessionService(db_url), args.events, args.loads, f"bench-{r}",
                    ))
                rounds[system].append(result)
                print(f"round {r + 1} {system}: {json.dumps({k: round(v, 3) for k, v in result.items()})}",
                      file=sys.stderr)
    finally:
        if server_cm is not None:
            server_cm.__exit__(None, None, None)
        shutil.rmtree(tmp, ignore_errors=True)

    def medians(results: list[dict[str, Any]]) -> dict[str, float]:
        return {k: round(statistics.median(r[k] for r in results), 3) for k in results[0]}

    summary = {system: medians(results) for system, results in rounds.items()}
    s, d = summary["stepwise"], summary["database_sqlite"]
    summary["ratio"] = {
        "append_per_s": round(s["append_per_s"] / d["append_per_s"], 2),
        "append_p50": round(d["append_p50_ms"] / s["append_p50_ms"], 2),
        "get_session_cold": round(d["get_session_cold_ms"] / s["get_session_cold_ms"], 2),
        "get_session_warm": round(d["get_session_warm_ms"] / s["get_session_warm_ms"], 2),
    }
    summary["setup"] = {
        "events": args.events,
        "loads": args.loads,
        "rounds": args.rounds,
        "stepwise": url if args.url else binary,
        "server_args": args.server_arg,
        "data_dir": str(tmp),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "google_adk": _version("google-adk"),
    }
    text_out = json.dumps(summary, indent=2)
    print(text_out)
    if args.out:
        Path(args.out).write_text(text_out + "\n")


def _version(package: str) -> str:
    from importlib.metadata import version

    try:
        return version(package)
    except Exception:  # pragma: no cover
        return "?"


if __name__ == "__main__":
    main()
