"""LangGraph on Stepwise: the peer benchmark of bench_langgraph_sqlite.py with StepwiseSaver.

The same graph (`lg_common.builder()`: a `messages` list that grows by one ~2 KB step per
`graph.invoke`, append reducer), the same 1,000 steps (W1), 200 sessions x 50 steps (W2),
restore by `graph.get_state` (W3) and bytes stored per step (W4), against a `stepwise serve`
(release build) on a fresh SQLite database per workload.

    python bench/peers/bench_langgraph_stepwise.py --variant all --out /tmp/lg-stepwise.json

Variants: graph (StepwiseSaver, graph.invoke per step) [default]; graph_async
(AsyncStepwiseSaver, graph.ainvoke); saver (StepwiseSaver.put direct); memory (the same graph
on LangGraph's InMemorySaver); sqlite (the SqliteSaver peer, run from its own script's
functions); floor (LangGraph alone: a checkpointer that keeps the latest checkpoint object and
nothing else, the ceiling of any saver with this graph here); all = floor, memory, sqlite and
graph in one sitting, with the goals checked.

Stepwise's W1 also reports `cpu_ms_per_step`: the CPU (user + system) per step of this process
(LangGraph and the saver, all threads) and of the server's process (Linux; null elsewhere). On a
machine with few cores the two compete, so it tells which side a change made cheaper.

The shared peer modules (common.py, lg_common.py, bench_langgraph_sqlite.py) are read from
$STEPWISE_PEERS_DIR, default ../shared/bench/peers beside this repository. Databases go to
--data (default target/bench-peers). The server binary is --bin (default
target/release/stepwise; build it with `cargo build --release -p stepwise`).
"""
from __future__ import annotations

import asyncio
import os
import resource
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PEERS = Path(os.environ.get("STEPWISE_PEERS_DIR", REPO.parent / "shared" / "bench" / "peers"))
sys.path.insert(0, str(PEERS))
sys.path.insert(0, str(REPO / "clients" / "python" / "src"))

import common as C  # noqa: E402
import lg_common as L  # noqa: E402
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, empty_checkpoint, uuid6  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from stepwise.langgraph import AsyncStepwiseSaver, StepwiseSaver  # noqa: E402
from stepwise.testing import LocalServer  # noqa: E402

PKGS = ("langgraph", "langgraph-checkpoint", "stepwise-client", "httpx")
LIST_THREAD_CHECKPOINTS = 20_000


def server(a, name: str) -> LocalServer:
    path = C.fresh_db(name)
    return LocalServer(binary=a.bin, database=f"sqlite://{path}", args=["--durability", a.durability]).start()


def db_path(srv: LocalServer) -> Path:
    return Path(srv.database.removeprefix("sqlite://"))


def w4_of(srv: LocalServer, steps: int) -> dict:
    srv.stop()
    return C.w4_result(C.sqlite_size_after_checkpoint(db_path(srv)), steps)


def cpu_now(srv: LocalServer) -> tuple[float, float | None]:
    """CPU seconds (user + system) so far of this process, all its threads, and of the
    server's process (Linux /proc; None elsewhere)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    server_s = None
    try:
        fields = Path(f"/proc/{srv.pid}/stat").read_text().rsplit(")", 1)[1].split()
        server_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        pass
    return me.ru_utime + me.ru_stime, server_s


def cpu_per_step(before: tuple[float, float | None], after: tuple[float, float | None],
                 steps: int) -> dict:
    """W1's CPU per step in ms: this process (LangGraph and the saver) and the server."""
    client = (after[0] - before[0]) / steps * 1e3
    server = None if before[1] is None or after[1] is None else (after[1] - before[1]) / steps * 1e3
    return {"client": client, "server": server}


def ms(values: list[float]) -> dict:
    return {"p50_ms": C.pct(values, 50) * 1e3, "p90_ms": C.pct(values, 90) * 1e3, "n": len(values)}


# --------------------------------------------------------------------------- Stepwise, sync


def run_stepwise(a, variant: str) -> dict:
    L.prepare_sources(a)
    steps = C.w1_steps(a.w1)

    def runner(saver):
        if variant == "saver":
            d = L.DirectSaverDriver(saver)
            return lambda tid, s: d.save(tid, s)
        graph = L.builder().compile(checkpointer=saver)
        return lambda tid, s: graph.invoke({"turn": s["step"]}, L.cfg(tid))

    srv = server(a, f"lg_stepwise_{variant}_w1.db")
    try:
        with StepwiseSaver(base_url=srv.url) as saver:
            save = runner(saver)
            cpu0 = cpu_now(srv)
            lat, total, io = L.time_w1_sync(lambda s: save(C.W1_SESSION, s), steps)
            w1 = {**C.w1_result(lat, total, **io), "cpu_ms_per_step": cpu_per_step(cpu0, cpu_now(srv), len(steps))}
            # W3: restore the 1,000-step thread. Warm: the same saver again and again (it
            # holds the list, the server sends what is new: nothing). Cold: a new saver and
            # client each time (the whole list comes over HTTP).
            graph = L.builder().compile(checkpointer=saver)
            back = L.restore_graph(graph, C.W1_SESSION)
            warm = []
            for _ in range(C.W3_LOADS):
                t = C.now()
                back = L.restore_graph(graph, C.W1_SESSION)
                warm.append(C.now() - t)
            C.check_restored(back, a.w1)
            tup_warm = []
            for _ in range(C.W3_LOADS):
                t = C.now()
                saver.get_tuple(L.cfg(C.W1_SESSION))
                tup_warm.append(C.now() - t)
        cold, tup_cold = [], []
        for _ in range(C.W3_LOADS):
            t = C.now()
            with StepwiseSaver(base_url=srv.url) as fresh:
                back = L.restore_graph(L.builder().compile(checkpointer=fresh), C.W1_SESSION)
            cold.append(C.now() - t)
            with StepwiseSaver(base_url=srv.url) as fresh:
                fresh.get_tuple(L.cfg(C.W1_SESSION))  # connection set up, not timed
                fresh._wire.cache.drop_threads(None)
                t = C.now()
                fresh.get_tuple(L.cfg(C.W1_SESSION))
                tup_cold.append(C.now() - t)
        C.check_restored(back, a.w1)
        w3 = {"cold_ms_median": C.pct(cold, 50) * 1e3, "cold_note": "new saver + client per load, in process",
              **C.warm_summary(warm), "steps_loaded": len(back),
              "get_tuple_latest_warm": ms(tup_warm), "get_tuple_latest_cold": ms(tup_cold)}
    finally:
        w4 = w4_of(srv, len(steps))
        srv.close()

    w2 = None
    if not a.skip_w2:
        srv = server(a, f"lg_stepwise_{variant}_w2.db")
        try:
            with StepwiseSaver(base_url=srv.url) as saver:
                save = runner(saver)
                order = L.w2_order(a)
                t0 = C.now()
                for sid, n in order:
                    save(sid, L.STEP_SOURCE[(sid, n)])
                t2 = C.now() - t0
            w2 = {"sessions": a.w2_sessions, "steps_per_session": a.w2_steps, "total_s": t2,
                  "steps_per_s": len(order) / t2}
        finally:
            srv.close()
    return {"w1": w1, "w2": w2, "w3": w3, "w4": w4}


async def run_stepwise_async(a) -> dict:
    L.prepare_sources(a)
    steps = C.w1_steps(a.w1)
    srv = server(a, "lg_stepwise_graph_async_w1.db")
    try:
        async with AsyncStepwiseSaver(base_url=srv.url) as saver:
            graph = L.builder().compile(checkpointer=saver)
            cpu0 = cpu_now(srv)
            lat, total, io = await L.time_w1_async(
                lambda s: graph.ainvoke({"turn": s["step"]}, L.cfg(C.W1_SESSION)), steps)
            w1 = {**C.w1_result(lat, total, **io), "cpu_ms_per_step": cpu_per_step(cpu0, cpu_now(srv), len(steps))}
            await L.arestore_graph(graph, C.W1_SESSION)
            warm = []
            for _ in range(C.W3_LOADS):
                t = C.now()
                back = await L.arestore_graph(graph, C.W1_SESSION)
                warm.append(C.now() - t)
        C.check_restored(back, a.w1)
        w3 = {**C.warm_summary(warm), "steps_loaded": len(back)}
    finally:
        w4 = w4_of(srv, len(steps))
        srv.close()
    return {"w1": w1, "w2": None, "w3": w3, "w4": w4}


def list_figure(a) -> dict:
    """list(config, limit=20) on a thread of 20,000 checkpoints (small state: a counter)."""
    srv = server(a, "lg_stepwise_list.db")
    try:
        with StepwiseSaver(base_url=srv.url) as saver:
            conf = {"configurable": {"thread_id": "list-thread", "checkpoint_ns": ""}}
            version = None
            t0 = C.now()
            for n in range(LIST_THREAD_CHECKPOINTS):
                version = saver.get_next_version(version, None)
                cp = empty_checkpoint()
                cp["id"] = str(uuid6(clock_seq=n))
                cp["ts"] = datetime.now(timezone.utc).isoformat()
                cp["channel_values"] = {"turn": n}
                cp["channel_versions"] = {"turn": version}
                conf = saver.put(conf, cp, {"source": "loop", "step": n, "parents": {}}, {"turn": version})
            fill_s = C.now() - t0
            head = {"configurable": {"thread_id": "list-thread"}}
            got = list(saver.list(head, limit=20))
            assert len(got) == 20 and got[0].checkpoint["channel_values"]["turn"] == LIST_THREAD_CHECKPOINTS - 1
            lat = []
            for _ in range(C.W3_LOADS):
                t = C.now()
                got = list(saver.list(head, limit=20))
                lat.append(C.now() - t)
            before = list(saver.list(head, before=got[-1].config, limit=20))
            assert before[0].checkpoint["channel_values"]["turn"] == LIST_THREAD_CHECKPOINTS - 21
        return {"checkpoints": LIST_THREAD_CHECKPOINTS, "fill_puts_per_s": LIST_THREAD_CHECKPOINTS / fill_s,
                "list_limit_20": ms(lat)}
    finally:
        srv.close()


# --------------------------------------------------------------------------- the peers, same sitting


class LatestOnlySaver(BaseCheckpointSaver):
    """Keeps each thread's latest checkpoint as the object LangGraph handed over: no copy, no
    serialization, no pending writes. Not a usable saver: it measures LangGraph's own cost per
    step, the most steps/s any checkpointer can reach with this graph in this process."""

    def __init__(self) -> None:
        super().__init__()
        self.latest: dict[str, CheckpointTuple] = {}

    def get_tuple(self, config):
        return self.latest.get(config["configurable"]["thread_id"])

    def list(self, config, *, filter=None, before=None, limit=None):
        return iter(())

    def put(self, config, checkpoint, metadata, new_versions):
        thread_id = config["configurable"]["thread_id"]
        conf = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint["id"]}}
        self.latest[thread_id] = CheckpointTuple(conf, checkpoint, metadata, config, [])
        return conf

    def put_writes(self, config, writes, task_id, task_path=""):
        pass


def run_in_process(a, saver) -> dict:
    L.prepare_sources(a)
    steps = C.w1_steps(a.w1)
    graph = L.builder().compile(checkpointer=saver)
    lat, total, io = L.time_w1_sync(lambda s: graph.invoke({"turn": s["step"]}, L.cfg(C.W1_SESSION)), steps)
    w1 = C.w1_result(lat, total, **io)
    warm = []
    for _ in range(C.W3_LOADS):
        t = C.now()
        back = L.restore_graph(graph, C.W1_SESSION)
        warm.append(C.now() - t)
    C.check_restored(back, a.w1)
    return {"w1": w1, "w2": None, "w3": C.warm_summary(warm), "w4": None}


def run_sqlite(a) -> dict:
    import bench_langgraph_sqlite as S

    w1, w2, w3, w4 = S.run_sync(a, "graph")
    for name in ("lg_sqlite_graph_w1.db", "lg_sqlite_graph_w2.db"):  # gigabytes: measured, not kept
        for suffix in ("", "-wal", "-shm"):
            Path(C.DATA / (name + suffix)).unlink(missing_ok=True)
    return {"w1": w1, "w2": w2, "w3": w3, "w4": w4}


# --------------------------------------------------------------------------- main


NAMES = {
    "graph": "LangGraph + Stepwise StepwiseSaver (graph.invoke/step)",
    "graph_async": "LangGraph + Stepwise AsyncStepwiseSaver (graph.ainvoke/step)",
    "saver": "LangGraph StepwiseSaver.put direct",
    "memory": "LangGraph InMemorySaver (graph.invoke/step)",
    "sqlite": "LangGraph SqliteSaver (graph.invoke/step)",
    "floor": "LangGraph alone: the latest checkpoint kept in memory, uncopied (graph.invoke/step)",
}


def run_variant(a, variant: str) -> dict:
    print(f"== {NAMES[variant]}", file=sys.stderr, flush=True)
    t = time.monotonic()
    if variant == "memory":
        r = run_in_process(a, InMemorySaver())
    elif variant == "floor":
        r = run_in_process(a, LatestOnlySaver())
    elif variant == "sqlite":
        r = run_sqlite(a)
    elif variant == "graph_async":
        r = asyncio.run(run_stepwise_async(a))
    else:
        r = run_stepwise(a, variant)
    cpu = r["w1"].get("cpu_ms_per_step")
    cpu_text = "" if not cpu else f", CPU per step: this process {cpu['client']:.2f} ms" + (
        "" if cpu["server"] is None else f", server {cpu['server']:.2f} ms")
    print(f"   {time.monotonic() - t:.1f} s, W1 {r['w1']['steps_per_s']:.0f} steps/s{cpu_text}", file=sys.stderr, flush=True)
    return {"peer": NAMES[variant], **r}


def goals(results: dict, listing: dict | None) -> dict:
    sw = results["graph"]
    w1 = sw["w1"]
    first, last = w1["windows"]["1-10"]["p50_ms"], w1["windows"].get("991-1000", {}).get("p50_ms")
    out = {
        "w4_bytes_per_step<=5000": {"value": sw["w4"]["bytes_per_step"], "met": sw["w4"]["bytes_per_step"] <= 5000},
        "w1_p50_991-1000<=2x_1-10": {"value": [first, last], "met": last is not None and last <= 2 * first},
        # Warm: the saver of the running graph (what each invoke does). Cold: a new process's
        # first read, the whole 1,000-item list over HTTP; reported, not the goal.
        "get_tuple_latest<=10ms": {"value": {"warm": sw["w3"]["get_tuple_latest_warm"]["p50_ms"],
                                             "cold": sw["w3"]["get_tuple_latest_cold"]["p50_ms"]},
                                   "met": sw["w3"]["get_tuple_latest_warm"]["p50_ms"] <= 10},
    }
    if "sqlite" in results:
        ratio = w1["steps_per_s"] / results["sqlite"]["w1"]["steps_per_s"]
        out["steps_per_s>=10x_sqlite"] = {"value": ratio, "met": ratio >= 10}
    if "memory" in results:
        ratio = w1["steps_per_s"] / results["memory"]["w1"]["steps_per_s"]
        out["steps_per_s>=0.5x_memory"] = {"value": ratio, "met": ratio >= 0.5}
        out["steps_per_s>=1.0x_memory"] = {"value": ratio, "met": ratio >= 1.0}
    if "floor" in results:
        # Not a goal: the share of LangGraph's own ceiling reached, and that ceiling against
        # SqliteSaver (no checkpointer can pass it).
        floor = results["floor"]["w1"]["steps_per_s"]
        out["share_of_floor"] = {"value": w1["steps_per_s"] / floor, "met": None}
        if "sqlite" in results:
            out["floor_vs_sqlite"] = {"value": floor / results["sqlite"]["w1"]["steps_per_s"], "met": None}
    if listing:
        v = listing["list_limit_20"]["p50_ms"]
        out["list_limit20_of_20000<=50ms"] = {"value": v, "met": v <= 50}
    return out


def main() -> None:
    ap = C.base_args(__doc__)
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "stepwise"))
    ap.add_argument("--data", default=str(REPO / "target" / "bench-peers"))
    ap.add_argument("--durability", default="full", choices=["full", "process"],
                    help="the server's SQLite durability (full = fsync per group commit, like SqliteSaver's FULL)")
    ap.add_argument("--skip-w2", action="store_true", help="skip W2 (200 sessions x 50 steps)")
    ap.add_argument("--skip-list", action="store_true", help="skip the 20,000-checkpoint list figure")
    a = ap.parse_args()
    C.DATA = Path(a.data)
    if a.cmd == "cold":
        raise SystemExit("cold: not used by this script (W3 cold is measured in process)")
    variant = a.variant or "graph"
    if variant == "all":
        results = {v: run_variant(a, v) for v in ("floor", "memory", "sqlite", "graph")}
        listing = None if a.skip_list else list_figure(a)
        report = {"key": "langgraph_stepwise_all", "versions": C.versions(*PKGS, "langgraph-checkpoint-sqlite"),
                  "server": a.bin, "durability": a.durability, "results": results, "list": listing, "goals": goals(results, listing)}
    else:
        results = {variant: run_variant(a, variant)}
        listing = None
        if variant == "graph" and not a.skip_list:
            listing = list_figure(a)
        report = {"key": f"langgraph_stepwise_{variant}", "versions": C.versions(*PKGS), "server": a.bin,
                  "durability": a.durability,
                  **results[variant], "list": listing}
        if variant == "graph":
            report["goals"] = goals(results, listing)
    C.emit(report, a.out)


if __name__ == "__main__":
    main()
