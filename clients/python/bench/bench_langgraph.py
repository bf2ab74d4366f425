"""LangGraph checkpointers: Stepwise's `StepwiseSaver` beside `SqliteSaver` and `InMemorySaver`.

    STEPWISE_BIN=target/release/stepwise python clients/python/bench/bench_langgraph.py
    python clients/python/bench/bench_langgraph.py --server-bin PATH --steps 300 --out r.json

One graph, compiled with each checkpointer in turn: a `StateGraph` whose state has a
``messages`` list with an append reducer (``operator.add``) and a ``turn``; one node appends
one ~2 KB agent step (a dict: thought, tool call, observation, token counts; deterministic,
`_workload.make_step`) per ``graph.invoke({"turn": n}, config)``, all on one thread, with
LangGraph's default durability (``invoke`` returns once its checkpoints are written). After
``--steps`` invokes (default 1,000) the state is read back with ``graph.get_state`` and
checked.

Savers (``--savers``, default all that are installed, in this order):

* ``memory``: LangGraph's `InMemorySaver`.
* ``stepwise``: `stepwise.langgraph.StepwiseSaver` over loopback HTTP to a ``stepwise
  serve`` started for the run (`stepwise.testing.LocalServer`: a free port, a temporary
  SQLite database, no rate limit, the server's default durability ``full``).
* ``sqlite``: `langgraph.checkpoint.sqlite.SqliteSaver` (``pip install
  langgraph-checkpoint-sqlite``; skipped when it is not installed) on a file in a temporary
  directory, WAL mode as the saver sets it, SQLite's default ``synchronous=FULL``. It stores
  every checkpoint's channel values whole, so its time and size per step grow with the
  thread.

Reported per saver: steps (invokes) per second, invoke latency (p50, p99, max, ms) and
``get_state`` time; for the two that write a SQLite database, its size once nobody has it
open and its WAL is folded back (``PRAGMA wal_checkpoint(TRUNCATE)``; Stepwise's server is
stopped first), divided by the steps, and the bytes per table (indexes counted with their
table, from SQLite's ``dbstat``), and the rows per step of the checkpoint tables. One JSON
object goes to stdout (and ``--out FILE``).
"""

from __future__ import annotations

import argparse
import json
import operator
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from stepwise.langgraph import StepwiseSaver
from stepwise.testing import LocalServer, find_binary

from _workload import host, make_step, ms, percentile, sqlite_size, versions  # beside this script

THREAD_ID = "bench-langgraph"
SAVERS = ("memory", "stepwise", "sqlite")
# Rows counted per step, per saver's database: table names.
_COUNTED = {
    "stepwise": ("checkpoints", "checkpoint_blobs", "checkpoint_writes"),
    "sqlite": ("checkpoints", "writes"),
}


class State(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]
    turn: int


def build_graph(steps: list[dict[str, Any]]) -> StateGraph:
    """The graph: START -> agent -> END; `agent` appends step `turn` (1-based) of `steps`."""

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [steps[state["turn"] - 1]]}

    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", END)
    return graph


def config() -> RunnableConfig:
    return {"configurable": {"thread_id": THREAD_ID}}


def run_graph(saver: BaseCheckpointSaver[Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Invokes the graph once per step, then reads the state back and checks it."""
    graph = build_graph(steps).compile(checkpointer=saver)
    latencies: list[float] = []
    started = time.perf_counter()
    for n in range(1, len(steps) + 1):
        t = time.perf_counter()
        graph.invoke({"turn": n}, config())
        latencies.append(time.perf_counter() - t)
    total = time.perf_counter() - started
    t = time.perf_counter()
    messages = graph.get_state(config()).values["messages"]
    get_state = time.perf_counter() - t
    if len(messages) != len(steps) or messages[0] != steps[0] or messages[-1] != steps[-1]:
        raise AssertionError(f"get_state gave {len(messages)} messages, not the {len(steps)} stored")
    return {
        "steps": len(steps),
        "total_s": round(total, 3),
        "steps_per_s": round(len(steps) / total, 1),
        "p50_ms": ms(percentile(latencies, 50)),
        "p99_ms": ms(percentile(latencies, 99)),
        "max_ms": ms(max(latencies)),
        "mean_ms": ms(statistics.fmean(latencies)),
        "first_100_p50_ms": ms(percentile(latencies[:100], 50)),
        "last_100_p50_ms": ms(percentile(latencies[-100:], 50)),
        "get_state_ms": ms(get_state),
    }


def storage(path: Path, steps: int, tables: tuple[str, ...]) -> dict[str, Any]:
    """Bytes (and rows) per step of a database nobody has open."""
    size = sqlite_size(path)
    rows: dict[str, float] = {}
    con = sqlite3.connect(str(path))
    try:
        for table in tables:
            rows[table] = con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] / steps
    finally:
        con.close()
    return {
        "db_bytes": size["bytes"],
        "bytes_per_step": round(size["bytes"] / steps, 1),
        "freelist_pages": size["freelist_pages"],
        "table_bytes_per_step": (
            {name: round(b / steps, 1) for name, b in size["tables"].items()} if size["tables"] else None
        ),
        "rows_per_step": rows,
    }


# --------------------------------------------------------------------------- the savers


def bench_memory(steps: list[dict[str, Any]], _: argparse.Namespace) -> dict[str, Any]:
    return run_graph(InMemorySaver(), steps)


def bench_stepwise(steps: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    server = LocalServer(binary=args.server_bin).start()
    try:
        with StepwiseSaver(base_url=server.url) as saver:
            result = run_graph(saver, steps)
        server.stop()  # the database is closed: its size is final
        path = Path(server.database.removeprefix("sqlite://"))
        result.update(storage(path, len(steps), _COUNTED["stepwise"]))
        result["server"] = server.binary
        result["durability"] = "full (server default)"
    finally:
        server.close()
    return result


def bench_sqlite(steps: list[dict[str, Any]], _: argparse.Namespace) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    with tempfile.TemporaryDirectory(prefix="bench-lg-sqlite-") as tmp:
        path = Path(tmp) / "checkpoints.db"
        conn = sqlite3.connect(str(path), check_same_thread=False)
        try:
            result = run_graph(SqliteSaver(conn), steps)
        finally:
            conn.close()
        result.update(storage(path, len(steps), _COUNTED["sqlite"]))
        result["synchronous"] = "FULL (SQLite default)"
    return result


BENCHES: dict[str, Callable[[list[dict[str, Any]], argparse.Namespace], dict[str, Any]]] = {
    "memory": bench_memory,
    "stepwise": bench_stepwise,
    "sqlite": bench_sqlite,
}


def sqlite_saver_installed() -> bool:
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--server-bin", default=None, help="stepwise binary (default: $STEPWISE_BIN, else stepwise on PATH)")
    parser.add_argument("--steps", type=int, default=1000, help="graph invokes per saver (default 1000)")
    parser.add_argument(
        "--savers", default=",".join(SAVERS), help=f"comma-separated, of {', '.join(SAVERS)} (default: all)"
    )
    parser.add_argument("--out", default=None, help="also write the JSON result to this file")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    chosen = [s.strip() for s in args.savers.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in BENCHES]
    if unknown:
        parser.error(f"unknown saver(s) {unknown}; choose from {list(SAVERS)}")
    if "stepwise" in chosen:
        args.server_bin = str(Path(args.server_bin).resolve()) if args.server_bin else find_binary()

    steps = [make_step(THREAD_ID, n) for n in range(1, args.steps + 1)]
    step_bytes = statistics.fmean(len(json.dumps(s, separators=(",", ":"))) for s in steps)
    results: dict[str, Any] = {}
    for name in chosen:
        if name == "sqlite" and not sqlite_saver_installed():
            results[name] = {"skipped": "langgraph-checkpoint-sqlite is not installed"}
            continue
        results[name] = BENCHES[name](steps, args)

    report: dict[str, Any] = {
        "benchmark": "LangGraph checkpointers: one ~2 KB message appended per graph.invoke",
        "steps": args.steps,
        "step_json_bytes_mean": round(step_bytes, 1),
        "savers": results,
    }
    stepwise = results.get("stepwise", {})
    ratios = {
        f"stepwise/{other}": round(stepwise["steps_per_s"] / results[other]["steps_per_s"], 3)
        for other in ("memory", "sqlite")
        if "steps_per_s" in stepwise and "steps_per_s" in results.get(other, {})
    }
    if ratios:
        report["ratio_steps_per_s"] = ratios
    report["versions"] = versions(
        "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "stepwise-client"
    )
    report["host"] = host()
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
