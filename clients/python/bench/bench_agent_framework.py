"""What StepwiseHistoryProvider costs Microsoft Agent Framework: one save, and a long history's load.

    STEPWISE_BIN=target/release/stepwise python clients/python/bench/bench_agent_framework.py

Starts `stepwise serve` with `stepwise.testing.local_server()` (a temporary SQLite database,
loopback) and prints one JSON object:

* ``save_one_message_ms``: ``save_messages(session_id, [message])`` of one short message, one
  call after the other on one session (p50/p90/p99 over ``--saves`` calls, in milliseconds);
  each is one append-only ``POST .../items`` answered by the server.
* ``bare_post_ms``: the same write sent bare, alternating with the saves (one ``POST .../items``
  of one message's item to another session over the same connection, no version, no provider):
  what the server and the connection cost alone.
* ``load_history_ms``: ``get_messages(session_id)`` of a history of ``--history`` messages
  (alternating user and assistant text, about 40 characters each) by a provider that has not
  read it before, as the framework does at the start of a run (p50/p90 over ``--loads``).
* ``load_history_kept_ms``: the same load again by a provider that read it before and keeps it
  (the version is unchanged: one ``GET .../items?limit=0``), as at every later run or model call.
* ``load_split_ms``: the same load split into the HTTP exchange (``GET .../items``, with the
  JSON parsing) and the decoding into ``Message`` objects (p50).
* ``server``: the binary measured (a debug build is far slower than a release one).

Options: ``--saves N`` (default 500), ``--history N`` (default 1000), ``--loads N`` (default 30),
``--rounds N`` (default 3: the figures are the medians of the rounds' percentiles, on a shared
machine one round can be an outlier), ``--durability full|process`` (the server's SQLite
durability: ``full``, its default, syncs each commit to disk before answering).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
import warnings
from typing import Any

warnings.simplefilter("ignore")  # the framework's notice that SessionStore is experimental

from agent_framework import Message  # noqa: E402

from stepwise import AsyncStepwise  # noqa: E402
from stepwise.agent_framework import StepwiseHistoryProvider, decode_items, encode_message
from stepwise.testing import find_binary, local_server  # noqa: E402


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "mean": round(statistics.fmean(ordered) * 1000, 3)}


async def measure(url: str, saves: int, history: int, loads: int) -> dict[str, Any]:
    async with AsyncStepwise(url) as client:
        provider = StepwiseHistoryProvider(client=client)
        session_id = f"bench-save-{uuid.uuid4().hex[:8]}"
        await provider.save_messages(session_id, [Message(role="user", contents=["warm up"])])
        # Each save alternates with the same write sent bare to another session (one POST
        # .../items of one message's item over the same connection, no version, no provider), so
        # both meet the same machine.
        raw_id = await provider.stepwise_session_id(f"bench-bare-{uuid.uuid4().hex[:8]}")
        save_times, post_times = [], []
        for i in range(saves):
            message = Message(role="user" if i % 2 else "assistant", contents=[f"message {i}: a short line of text"])
            start = time.perf_counter()
            await provider.save_messages(session_id, [message])
            save_times.append(time.perf_counter() - start)
            items = encode_message(Message(role="user", contents=[f"bare {i}: a short line of text"]))
            start = time.perf_counter()
            await provider._connections.call("POST", f"/v1/sessions/{raw_id}/items", json_body={"items": items})
            post_times.append(time.perf_counter() - start)

        long_id = f"bench-load-{uuid.uuid4().hex[:8]}"
        messages = [
            Message(role="user" if i % 2 == 0 else "assistant", contents=[f"message number {i} with a few words"])
            for i in range(history)
        ]
        for i in range(0, history, 200):
            await provider.save_messages(long_id, messages[i : i + 200])
        load_times, http_times, decode_times = [], [], []
        for _ in range(loads):
            reader = StepwiseHistoryProvider(client=client)
            start = time.perf_counter()
            got = await reader.get_messages(long_id)
            load_times.append(time.perf_counter() - start)
            assert len(got) == history, len(got)
            await reader.aclose()
        warm = StepwiseHistoryProvider(client=client)
        await warm.get_messages(long_id)
        kept_times = []
        for _ in range(loads):
            start = time.perf_counter()
            got = await warm.get_messages(long_id)
            kept_times.append(time.perf_counter() - start)
            assert len(got) == history
        stepwise_id = await provider.stepwise_session_id(long_id)
        reader = StepwiseHistoryProvider(client=client)
        path = f"/v1/sessions/{stepwise_id}/items"
        for _ in range(loads):
            start = time.perf_counter()
            answer = await reader._connections.call("GET", path)
            middle = time.perf_counter()
            decoded = decode_items(answer["items"])
            end = time.perf_counter()
            assert len(decoded.messages) == history
            http_times.append(middle - start)
            decode_times.append(end - middle)
        item_bytes = len(json.dumps([item for m in messages for item in encode_message(m)]))
        await provider.aclose()
        await reader.aclose()
    return {
        "save_one_message_ms": percentiles(save_times),
        "bare_post_ms": percentiles(post_times),
        "load_history_ms": {"messages": history, "items_json_bytes": item_bytes, **percentiles(load_times)},
        "load_history_kept_ms": percentiles(kept_times),
        "load_split_ms": {"http_and_json": percentiles(http_times)["p50"], "decode": percentiles(decode_times)["p50"]},
    }


def median_of(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The rounds' results with every number replaced by its median over the rounds."""
    first = rounds[0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        if isinstance(value, dict):
            out[key] = median_of([r[key] for r in rounds])
        elif isinstance(value, (int, float)):
            out[key] = round(statistics.median(r[key] for r in rounds), 3)
        else:
            out[key] = value
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--saves", type=int, default=500)
    parser.add_argument("--history", type=int, default=1000)
    parser.add_argument("--loads", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--durability", choices=["full", "process"], default="full")
    args = parser.parse_args()
    binary = find_binary()
    with local_server(args=["--durability", args.durability]) as server:
        rounds = [asyncio.run(measure(server.url, args.saves, args.history, args.loads)) for _ in range(args.rounds)]
    result = median_of(rounds)
    result["rounds"] = args.rounds
    result["durability"] = args.durability
    result["server"] = os.path.realpath(binary)
    result["python"] = sys.version.split()[0]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
