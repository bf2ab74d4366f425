"""OpenAI Agents SDK sessions: `StepwiseSession` (over loopback HTTP and over the server's Unix
socket) beside `SQLiteSession`, in one sitting.

The workload of the peers' `bench_openai_agents.py` (their `common.py` is imported from
`../shared/bench/peers` beside this repository): one step = one `add_items()` of the three
Responses-API items an agent turn makes (assistant message, `function_call`,
`function_call_output`), 1,000 steps each awaited before the next (W1); then the restore,
`get_items()` of the 3,000 items turned back into steps (W3 warm, 20 loads). Both sessions run
in this process, alternating rounds, so they see the same machine; the figures are the
medians over rounds.

    cargo build --release -p stepwise
    python bench/peers/bench_openai_agents_stepwise.py            # target/release/stepwise
    python bench/peers/bench_openai_agents_stepwise.py --rounds 5 --out /tmp/oa-stepwise.json
    STEPWISE_BIN=path python bench/peers/bench_openai_agents_stepwise.py
    python bench/peers/bench_openai_agents_stepwise.py --url http://127.0.0.1:7777   # a running server

Without `--url` it starts `stepwise serve` on a free loopback port and a Unix socket (`--listen
unix:PATH` too) with a fresh SQLite database (`stepwise.testing.local_server`, no rate limit), and
each round runs `StepwiseSession` over both (`stepwise` over TCP, `stepwise_unix` over the
socket). Durability is the same by default:
the SDK's SQLiteSession commits in WAL mode with `synchronous=FULL` (an fsync per add), and so
does Stepwise's SQLite store at its default `--durability full` (an add is synced before it is
acknowledged). `--durability process` starts the server with `synchronous=NORMAL`: a crash of
the process loses nothing, a power loss can lose the last moments.

Prints one JSON object: per system `w1_steps_per_s` and latency percentiles,
`get_items_ms_median` (`get_items()` of the 3,000 items) and `w3_warm_ms_median` (with the
items -> steps conversion, as the peers time it), and `ratio.steps_per_s` (Stepwise /
SQLiteSession) and `stepwise_get_items_ms`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PEERS = REPO.parent / "shared" / "bench" / "peers"
sys.path.insert(0, str(PEERS))
sys.path.insert(0, str(REPO / "clients" / "python" / "src"))

import common as C  # noqa: E402  (the peers' workload)
from bench_openai_agents import from_items, to_items  # noqa: E402

from agents import SQLiteSession  # noqa: E402

from stepwise.openai_agents import StepwiseSession  # noqa: E402
from stepwise.testing import local_server  # noqa: E402


async def w1(session, items: list[list[dict]]) -> dict:
    lat = []
    t0 = C.now()
    for batch in items:
        t = C.now()
        await session.add_items(batch)
        lat.append(C.now() - t)
    total = C.now() - t0
    return C.w1_result(lat, total, items_per_step=3)


async def w3(session, expect: int, loads: int) -> dict:
    back = from_items(await session.get_items())  # the first read is not timed
    lat, raw = [], []
    for _ in range(loads):
        t = C.now()
        back = from_items(await session.get_items())
        lat.append(C.now() - t)
        t = C.now()
        await session.get_items()
        raw.append(C.now() - t)
    C.check_restored(back, expect)
    # warm_ms_*: get_items() and the items -> steps conversion (as the peers time it);
    # get_items_ms_median: get_items() alone.
    return {**C.warm_summary(lat), "get_items_ms_median": C.pct(raw, 50) * 1e3,
            "steps_loaded": len(back)}


async def one_round(urls: dict[str, str], n: int, loads: int, tmp: Path, index: int) -> dict:
    items = [to_items(s) for s in C.w1_steps(n)]
    out: dict = {}

    path = tmp / f"sqlite-session-{index}.db"
    sqlite = SQLiteSession(C.W1_SESSION, str(path))
    out["sqlite"] = {"w1": await w1(sqlite, items), "w3": await w3(sqlite, n, loads)}
    sqlite.close()

    for system, url in urls.items():
        stepwise = StepwiseSession(f"{C.W1_SESSION}-{uuid.uuid4().hex[:8]}", base_url=url)
        await stepwise.get_items(0)  # creates the session: not part of the timed adds
        out[system] = {"w1": await w1(stepwise, items), "w3": await w3(stepwise, n, loads)}
        await stepwise.aclose()
    return out


def summarize(rounds: list[dict]) -> dict:
    def med(system: str, *keys: str) -> float:
        values = []
        for r in rounds:
            v = r[system]
            for k in keys:
                v = v[k]
            values.append(v)
        return statistics.median(values)

    result: dict = {}
    systems = [s for s in ("sqlite", "stepwise", "stepwise_unix") if s in rounds[0]]
    for system in systems:
        result[system] = {
            "w1_steps_per_s": med(system, "w1", "steps_per_s"),
            "w1_p50_ms": med(system, "w1", "p50_all_ms"),
            "w1_p99_ms": med(system, "w1", "p99_all_ms"),
            "w3_warm_ms_median": med(system, "w3", "warm_ms_median"),
            "get_items_ms_median": med(system, "w3", "get_items_ms_median"),
        }
    result["ratio"] = {
        "steps_per_s": result["stepwise"]["w1_steps_per_s"] / result["sqlite"]["w1_steps_per_s"],
        "get_items_ms": result["stepwise"]["w3_warm_ms_median"]
        / result["sqlite"]["w3_warm_ms_median"],
    }
    result["stepwise_get_items_ms"] = result["stepwise"]["get_items_ms_median"]
    if "stepwise_unix" in result:
        result["ratio_unix"] = {
            "steps_per_s": result["stepwise_unix"]["w1_steps_per_s"] / result["sqlite"]["w1_steps_per_s"],
            "get_items_ms": result["stepwise_unix"]["w3_warm_ms_median"]
            / result["sqlite"]["w3_warm_ms_median"],
        }
    return result


async def run(urls: dict[str, str], a: argparse.Namespace) -> dict:
    rounds = []
    with tempfile.TemporaryDirectory(prefix="oa-bench-") as tmp:
        for i in range(a.rounds):
            r = await one_round(urls, a.w1, a.loads, Path(tmp), i)
            rounds.append(r)
            print(
                f"round {i + 1}: "
                + ", ".join(
                    f"{system} {r[system]['w1']['steps_per_s']:.0f} steps/s, get_items() "
                    f"{r[system]['w3']['get_items_ms_median']:.1f} ms"
                    for system in r
                ),
                file=sys.stderr,
            )
    return {"rounds": rounds, "summary": summarize(rounds)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a running Stepwise server (default: start one)")
    p.add_argument("--w1", type=int, default=C.W1_STEPS, help="steps (add_items calls) per round")
    p.add_argument("--loads", type=int, default=C.W3_LOADS, help="timed get_items() per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--durability", choices=["full", "process"],
                   help="the started server's --durability (default: the server's, full)")
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args()
    if not os.environ.get("STEPWISE_BIN"):
        release = REPO / "target" / "release" / "stepwise"
        if release.is_file():
            os.environ["STEPWISE_BIN"] = str(release)
    if a.url:
        result = asyncio.run(run({"stepwise": a.url}, a))
        binary = None
    else:
        args = ["--durability", a.durability] if a.durability else []
        with tempfile.TemporaryDirectory(prefix="oa-sock-") as sockets:
            socket = f"{sockets}/stepwise.sock"
            args += ["--listen", f"unix:{socket}"]
            with local_server(env={"STEPWISE_LOG": "warn"}, args=args) as server:
                urls = {"stepwise": server.url, "stepwise_unix": f"unix:{socket}"}
                result = asyncio.run(run(urls, a))
                binary = server.binary
    result["config"] = {
        "w1": a.w1, "loads": a.loads, "rounds": a.rounds, "items_per_step": 3,
        "server": a.url or f"local_server (SQLite, --durability {a.durability or 'default'})",
        "binary": binary,
        "sqlite_session": "file, WAL (set by SDK), synchronous=FULL (sqlite default)",
    }
    result["versions"] = C.versions("openai-agents", "httpx")
    text = json.dumps(result, indent=2)
    print(json.dumps(result["summary"], indent=2))
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
