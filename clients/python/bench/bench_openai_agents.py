"""OpenAI Agents SDK sessions: Stepwise's `StepwiseSession` beside the SDK's `SQLiteSession`.

    STEPWISE_BIN=target/release/stepwise python clients/python/bench/bench_openai_agents.py
    python clients/python/bench/bench_openai_agents.py --server-bin PATH --steps 1000 --out r.json

The same workload through both sessions, one after the other in this process:

* W1, appending: one session, ``--steps`` steps (default 1,000). A step is one
  ``await session.add_items(items)`` of the three Responses-API items an agent turn makes (an
  assistant message, a ``function_call`` and its ``function_call_output``), about 2 KB of JSON,
  each awaited before the next. Reported: steps per second over the whole run, and the
  latency of one ``add_items`` (p50, p99, max, in milliseconds). The first step includes
  creating the session.
* W3, restoring: ``get_items()`` of every item of that session (one untimed read first, then
  ``--loads`` timed ones; median and p90 in milliseconds), checked equal to what was added.

`SQLiteSession` writes a file in a temporary directory with SQLite's default
``synchronous=FULL`` (the SDK sets WAL mode). `StepwiseSession` talks over loopback HTTP to a
``stepwise serve`` started for the run (`stepwise.testing.local_server`: a free port, a
temporary SQLite database, no rate limit) at the server's default durability (``full``: each
group commit is synced before it is acknowledged). The steps are generated deterministically
(`_workload.make_step`, a fixed seed), so every run stores the same bytes.

Prints one JSON object (also written to ``--out FILE``): per session ``w1`` and ``w3``, and
``ratio.steps_per_s`` (Stepwise / SQLite) and ``ratio.get_items`` (Stepwise's median time /
SQLite's). Options: ``--server-bin PATH`` (default ``$STEPWISE_BIN``, else ``stepwise`` on
``PATH``), ``--steps N``, ``--loads N``, ``--out FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol, cast

from agents import SQLiteSession
from agents.items import TResponseInputItem

from stepwise.openai_agents import StepwiseSession
from stepwise.testing import find_binary, local_server

from _workload import host, make_step, ms, percentile, versions  # beside this script

Item = dict[str, Any]
SESSION_ID = "bench-openai-agents"

# --------------------------------------------------------------------------- the workload


def to_items(step: dict[str, Any]) -> list[Item]:
    """The three Responses-API items of one agent turn (the step number and token counts ride
    along on the assistant message as extra keys)."""
    call = step["tool_call"]
    return [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": step["thought"], "annotations": []}],
            "step": step["step"],
            "usage": step["tokens"],
        },
        {
            "type": "function_call",
            "call_id": call["id"],
            "name": call["name"],
            "arguments": json.dumps(call["arguments"], separators=(",", ":")),
        },
        {"type": "function_call_output", "call_id": call["id"], "output": step["observation"]},
    ]


# --------------------------------------------------------------------------- measuring


class Session(Protocol):
    async def add_items(self, items: list[TResponseInputItem]) -> None: ...

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]: ...


async def w1(session: Session, batches: list[list[Item]]) -> dict[str, Any]:
    """Appends the batches one `add_items` each, each awaited before the next."""
    latencies: list[float] = []
    started = time.perf_counter()
    for batch in batches:
        t = time.perf_counter()
        await session.add_items(cast(list[TResponseInputItem], batch))
        latencies.append(time.perf_counter() - t)
    total = time.perf_counter() - started
    return {
        "steps": len(batches),
        "total_s": round(total, 3),
        "steps_per_s": round(len(batches) / total, 1),
        "p50_ms": ms(percentile(latencies, 50)),
        "p99_ms": ms(percentile(latencies, 99)),
        "max_ms": ms(max(latencies)),
        "mean_ms": ms(statistics.fmean(latencies)),
    }


async def w3(session: Session, expected: list[Item], loads: int) -> dict[str, Any]:
    """Reads every item back `loads` times (after one untimed read); checks them."""
    items = await session.get_items()
    times: list[float] = []
    for _ in range(loads):
        t = time.perf_counter()
        items = await session.get_items()
        times.append(time.perf_counter() - t)
    if len(items) != len(expected) or items[0] != expected[0] or items[-1] != expected[-1]:
        raise AssertionError(f"restored {len(items)} items, not the {len(expected)} added")
    return {
        "items": len(items),
        "loads": loads,
        "get_items_ms_median": ms(percentile(times, 50)),
        "get_items_ms_p90": ms(percentile(times, 90)),
    }


async def run_sqlite(batches: list[list[Item]], loads: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-oa-sqlite-") as tmp:
        path = Path(tmp) / "sessions.db"
        session = SQLiteSession(SESSION_ID, str(path))
        try:
            result = {"w1": await w1(session, batches)}
            result["w3"] = await w3(session, [i for b in batches for i in b], loads)
        finally:
            session.close()
        return result


async def run_stepwise(url: str, batches: list[list[Item]], loads: int) -> dict[str, Any]:
    session = StepwiseSession(SESSION_ID, base_url=url)
    try:
        result = {"w1": await w1(session, batches)}
        result["w3"] = await w3(session, [i for b in batches for i in b], loads)
    finally:
        await session.aclose()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--server-bin", default=None, help="stepwise binary (default: $STEPWISE_BIN, else stepwise on PATH)")
    parser.add_argument("--steps", type=int, default=1000, help="add_items calls (default 1000)")
    parser.add_argument("--loads", type=int, default=20, help="timed get_items() calls (default 20)")
    parser.add_argument("--out", default=None, help="also write the JSON result to this file")
    args = parser.parse_args()
    if args.steps < 1 or args.loads < 1:
        parser.error("--steps and --loads must be at least 1")

    binary = str(Path(args.server_bin).resolve()) if args.server_bin else find_binary()
    batches = [to_items(make_step(SESSION_ID, n)) for n in range(1, args.steps + 1)]
    step_bytes = statistics.fmean(len(json.dumps(b, separators=(",", ":"))) for b in batches)

    sqlite_result = asyncio.run(run_sqlite(batches, args.loads))
    with local_server(binary=binary) as server:
        stepwise_result = asyncio.run(run_stepwise(server.url, batches, args.loads))

    result = {
        "benchmark": "openai-agents sessions: StepwiseSession vs SQLiteSession",
        "steps": args.steps,
        "items_per_step": 3,
        "step_json_bytes_mean": round(step_bytes, 1),
        "sqlite_session": {"synchronous": "FULL (SQLite default)", "journal_mode": "wal (set by the SDK)", **sqlite_result},
        "stepwise_session": {"server": binary, "durability": "full (server default)", "transport": "loopback HTTP", **stepwise_result},
        "ratio": {
            "steps_per_s": round(stepwise_result["w1"]["steps_per_s"] / sqlite_result["w1"]["steps_per_s"], 3),
            "get_items": round(
                stepwise_result["w3"]["get_items_ms_median"] / sqlite_result["w3"]["get_items_ms_median"], 3
            ),
        },
        "versions": versions("openai-agents", "stepwise-client"),
        "host": host(),
    }
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
