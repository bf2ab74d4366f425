"""LangGraph's Server API: Stepwise's `/langgraph` beside LangGraph's own in-memory dev server.

The same one-node graph (MessagesState; the node appends AIMessage("ok") at once, no model) is
served twice, one after the other in one sitting, and driven by the same client (`langgraph_sdk`
from the client venv):

* Stepwise: `stepwise serve` on a fresh SQLite file in a temp dir and a free port, plus one
  Python worker (`python -m stepwise.worker app:worker --concurrency C`) serving the graph with
  `worker.langgraph("one", graph)`, compiled with `StepwiseSaver(Stepwise())`;
* LangGraph: `langgraph dev` (langgraph-cli[inmem]) from a langgraph.json in a temp dir naming
  the same graph compiled without a checkpointer (the dev server's in-memory one is used),
  `--no-browser --no-reload --allow-blocking --n-jobs-per-worker C`, LangSmith tracing off.

Measured on each, with the same N, C, T:

1. first `values` event: the time from calling `client.runs.stream(thread, "one", input,
   stream_mode="values")` to the stream's first `values` event, over --runs runs after
   --warmup runs, one after the other; each run on a new thread made beforehand (not timed), or
   all on one thread with --thread same. Also the time until the stream ends (the run is done).
2. runs/s: C client threads, each with its own sync client, calling stateless
   `client.runs.wait(None, "one", input)` (a new thread per run) back to back for T seconds
   (runs started before the deadline are counted when they finish; runs/s = ok runs / the time
   until the last one finished). A run counts as ok when its values hold the node's "ok".

A table goes to stderr, one JSON object to stdout (as bench/workload.md's peer scripts do).
Nothing here asserts on a duration.

    target/py-venv/bin/python bench/peers/langgraph_api.py --runs 200 --clients 8 --seconds 20

The script re-runs itself with the client venv's Python (--client-python, default
target/py-venv/bin/python, $STEPWISE_BENCH_CLIENT_PYTHON) when the Python running it cannot
import langgraph_sdk, stepwise and langgraph. The server binary is --bin, else $STEPWISE_BIN,
else target/release/stepwise when it exists and is newer than the Rust sources, else
target/debug/stepwise (much slower; the output says which was used and whether it is older
than the sources). `langgraph dev` is --langgraph-dev (default /tmp/lgdev/bin/langgraph,
$STEPWISE_BENCH_LANGGRAPH_DEV).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
GRAPH = "one"
INPUT = {"messages": [{"role": "user", "content": "hi"}]}
PATIENCE_S = 120.0

GRAPH_MODULE = '''\
"""The benchmark's graph: one node that answers (after $LGAPI_BENCH_NODE_MS milliseconds)."""
import os
import time

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph

NODE_S = float(os.environ.get("LGAPI_BENCH_NODE_MS", "0")) / 1000.0


def answer(state: MessagesState) -> dict:
    if NODE_S > 0:
        time.sleep(NODE_S)
    return {"messages": [AIMessage("ok")]}


def builder() -> StateGraph:
    b = StateGraph(MessagesState)
    b.add_node("answer", answer)
    b.add_edge(START, "answer")
    b.add_edge("answer", END)
    return b
'''

# For `langgraph dev`: no checkpointer (the dev server brings its own in-memory one).
LANGGRAPH_MODULE = '''\
from lgbench_graph import builder

graph = builder().compile()
'''

# For the Stepwise worker.
STEPWISE_MODULE = '''\
from lgbench_graph import builder

from stepwise import Stepwise
from stepwise.langgraph import StepwiseSaver
from stepwise.worker import Worker

graph = builder().compile(checkpointer=StepwiseSaver(Stepwise()))
worker = Worker(Stepwise())
worker.langgraph("one", graph, description="one node, answers at once")
'''


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- arguments and environment -----------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="First-values latency and runs/s of a one-node graph on Stepwise's /langgraph "
        "and on `langgraph dev` (LangGraph's in-memory dev server), in one sitting.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=textwrap.dedent(
            """\
            A table goes to stderr, one JSON object to stdout (also to --out).
            Example:
              target/py-venv/bin/python bench/peers/langgraph_api.py --runs 200 --clients 8 --seconds 20
            """
        ),
    )
    p.add_argument("--runs", type=int, default=200, help="timed streamed runs per server (default 200)")
    p.add_argument("--warmup", type=int, default=20, help="untimed streamed runs first (default 20)")
    p.add_argument("--thread", choices=("new", "same"), default="new",
                   help="streamed runs each on a new thread made beforehand (default), or all on one thread")
    p.add_argument("--clients", type=int, default=8,
                   help="concurrent runs.wait clients; also the worker's --concurrency and langgraph dev's "
                   "--n-jobs-per-worker (default 8)")
    p.add_argument("--seconds", type=float, default=20.0, help="how long the runs.wait clients run (default 20)")
    p.add_argument("--only", choices=("stepwise", "langgraph"), help="measure one server only")
    p.add_argument("--node-ms", type=float, default=0.0,
                   help="the node works this long before answering (default 0): the first values event "
                        "(the run's input) should not wait for it")
    p.add_argument("--bin", default=None,
                   help="the stepwise binary (default: $STEPWISE_BIN, else target/release/stepwise when newer "
                   "than the sources, else target/debug/stepwise)")
    p.add_argument("--durability", choices=("full", "process"), default="full",
                   help="`stepwise serve --durability` (default full: each commit synced to disk)")
    p.add_argument("--client-python",
                   default=os.environ.get("STEPWISE_BENCH_CLIENT_PYTHON", str(REPO / "target" / "py-venv" / "bin" / "python")),
                   help="the Python with stepwise, langgraph and langgraph_sdk: runs this script's clients and the "
                   "Stepwise worker (default target/py-venv/bin/python, $STEPWISE_BENCH_CLIENT_PYTHON)")
    p.add_argument("--langgraph-dev",
                   default=os.environ.get("STEPWISE_BENCH_LANGGRAPH_DEV", "/tmp/lgdev/bin/langgraph"),
                   help="the `langgraph` CLI of a venv with langgraph-cli[inmem] (default /tmp/lgdev/bin/langgraph, "
                   "$STEPWISE_BENCH_LANGGRAPH_DEV)")
    p.add_argument("--keep", action="store_true", help="keep the temp dirs (logs, database)")
    p.add_argument("--out", default=None, help="also write the JSON result to this file")
    a = p.parse_args(argv)
    if a.runs < 1 or a.warmup < 0 or a.clients < 1 or a.seconds <= 0:
        p.error("--runs and --clients must be at least 1, --warmup at least 0, --seconds more than 0")
    return a


def have_client_modules() -> bool:
    try:
        import langgraph.graph  # noqa: F401
        import langgraph_sdk  # noqa: F401
        import stepwise  # noqa: F401
    except ImportError:
        return False
    return True


def newest_source_mtime() -> float:
    newest = 0.0
    for root in (REPO / "crates",):
        for path in root.rglob("*"):
            if path.suffix in (".rs", ".toml", ".sql", ".html", ".js", ".css") and "target" not in path.parts:
                try:
                    newest = max(newest, path.stat().st_mtime)
                except OSError:
                    pass
    for name in ("Cargo.toml", "Cargo.lock"):
        try:
            newest = max(newest, (REPO / name).stat().st_mtime)
        except OSError:
            pass
    return newest


def pick_binary(explicit: str | None) -> tuple[str, str]:
    """The stepwise binary, and a line saying which it is."""
    sources = newest_source_mtime()

    def age(path: Path) -> str:
        built = path.stat().st_mtime
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(built))
        stale = "older than the newest Rust source" if built < sources else "newer than the Rust sources"
        return f"built {stamp}, {stale}"

    if explicit:
        path = Path(explicit).resolve()
        return str(path), f"{path} (--bin; {age(path)})"
    if os.environ.get("STEPWISE_BIN"):
        path = Path(os.environ["STEPWISE_BIN"]).resolve()
        return str(path), f"{path} ($STEPWISE_BIN; {age(path)})"
    release = REPO / "target" / "release" / "stepwise"
    debug = REPO / "target" / "debug" / "stepwise"
    if release.is_file() and release.stat().st_mtime >= sources:
        return str(release), f"{release} (release build; {age(release)})"
    why = "no release build" if not release.is_file() else "the release build is older than the sources"
    if debug.is_file():
        return str(debug), f"{debug} (DEBUG build, much slower: {why}; {age(debug)})"
    if release.is_file():
        return str(release), f"{release} (release build; {age(release)}; there is no debug build)"
    sys.exit("no stepwise binary: build it (cargo build --release -p stepwise) or give --bin / $STEPWISE_BIN")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- processes ----------------------------------------------------------------------------------


class Proc:
    """A child process in its own process group, its output in a log file."""

    def __init__(self, name: str, command: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self._log.write(("--- " + " ".join(command) + "\n").encode())
        self._log.flush()
        self.process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 30) -> str:
        self._log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL after 15 s; then SIGKILL to what is left of the group."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(15.0)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(5.0)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()


def wait_until(what: str, ready: Callable[[], bool], procs: list[Proc], timeout: float = PATIENCE_S) -> float:
    start = time.monotonic()
    while True:
        for proc in procs:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited (status {proc.process.returncode}) while waiting for "
                                   f"{what}; its log ({proc.log_path}):\n{proc.tail()}")
        try:
            if ready():
                return time.monotonic() - start
        except Exception:  # noqa: BLE001 - not up yet
            pass
        if time.monotonic() - start > timeout:
            tails = "\n".join(f"--- {p.name} ({p.log_path}):\n{p.tail()}" for p in procs)
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}\n{tails}")
        time.sleep(0.05)


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as answer:
        return answer.status == 200


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPWISE_")}
    env.update({"PYTHONUNBUFFERED": "1", "NO_COLOR": "1", "LANGSMITH_TRACING": "false",
                "LANGCHAIN_TRACING_V2": "false", "LANGSMITH_TRACING_V2": "false", "LANGCHAIN_TRACING": "false"})
    env.pop("LANGSMITH_API_KEY", None)
    env.pop("LANGCHAIN_API_KEY", None)
    env.update(extra)
    return env


def start_stepwise(a: argparse.Namespace, binary: str, tmp: Path, procs: list[Proc]) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Proc("stepwise serve", [
        binary, "serve", "--listen", f"127.0.0.1:{port}", "--database", f"sqlite://{tmp / 'stepwise.db'}",
        "--data-dir", str(tmp), "--durability", a.durability, "--rate-limit-per-sec", "0",
        "--max-sse-per-tenant", "0", "--max-sse-per-session", "0",
    ], tmp, child_env({}), tmp / "server.log")
    procs.append(server)
    took = wait_until("/healthz", lambda: http_ok(f"{url}/healthz"), [server])
    log(f"  stepwise serve ready at {url} in {took:.1f} s (sqlite://{tmp / 'stepwise.db'}, --durability {a.durability})")
    (tmp / "lgbench_graph.py").write_text(GRAPH_MODULE)
    (tmp / "lgbench_stepwise.py").write_text(STEPWISE_MODULE)
    worker = Proc("stepwise worker", [
        a.client_python, "-m", "stepwise.worker", "lgbench_stepwise:worker", "--url", url,
        "--concurrency", str(a.clients), "-q",
    ], tmp, child_env({"STEPWISE_URL": url, "PYTHONPATH": str(tmp)}), tmp / "worker.log")
    procs.append(worker)
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=f"{url}/langgraph", api_key=None, timeout=30)
    took = wait_until("assistants.search to list the graph",
                      lambda: any(x["graph_id"] == GRAPH for x in client.assistants.search(limit=100)),
                      [server, worker])
    log(f"  worker (--concurrency {a.clients}) announced '{GRAPH}' after {took:.1f} s")
    return f"{url}/langgraph"


def start_langgraph(a: argparse.Namespace, tmp: Path, procs: list[Proc]) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    (tmp / "lgbench_graph.py").write_text(GRAPH_MODULE)
    (tmp / "lgbench_langgraph.py").write_text(LANGGRAPH_MODULE)
    (tmp / "langgraph.json").write_text(json.dumps(
        {"dependencies": ["."], "graphs": {GRAPH: "./lgbench_langgraph.py:graph"}}, indent=2))
    if not Path(a.langgraph_dev).is_file():
        raise RuntimeError(f"no `langgraph` CLI at {a.langgraph_dev} (pip install 'langgraph-cli[inmem]' in a venv, "
                           f"then --langgraph-dev VENV/bin/langgraph)")
    server = Proc("langgraph dev", [
        a.langgraph_dev, "dev", "--config", str(tmp / "langgraph.json"), "--port", str(port), "--host", "127.0.0.1",
        "--no-browser", "--no-reload", "--allow-blocking", "--n-jobs-per-worker", str(a.clients),
        "--server-log-level", "WARNING",
    ], tmp, child_env({"PYTHONPATH": str(tmp), "LOG_LEVEL": "WARNING"}), tmp / "langgraph-dev.log")
    procs.append(server)
    took = wait_until("/ok", lambda: http_ok(f"{url}/ok"), [server])
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=url, api_key=None, timeout=30)
    wait_until("assistants.search to list the graph",
               lambda: any(x["graph_id"] == GRAPH for x in client.assistants.search(limit=100)), [server])
    log(f"  langgraph dev ready at {url} in {took:.1f} s (--n-jobs-per-worker {a.clients})")
    return url


# --- measurements -------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def holds_ok(values: Any) -> bool:
    if not isinstance(values, dict):
        return False
    return any(isinstance(m, dict) and m.get("content") == "ok" for m in values.get("messages", []))


def first_values(a: argparse.Namespace, url: str) -> dict[str, Any]:
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=url, api_key=None, timeout=PATIENCE_S)
    same = client.threads.create()["thread_id"] if a.thread == "same" else None
    firsts: list[float] = []
    ends: list[float] = []
    errors = 0
    first_error = None
    for i in range(a.warmup + a.runs):
        thread = same or client.threads.create()["thread_id"]
        first = None
        last_values = None
        t0 = time.perf_counter()
        try:
            for part in client.runs.stream(thread, GRAPH, input=INPUT, stream_mode="values"):
                if part.event == "values":
                    if first is None:
                        first = time.perf_counter() - t0
                    last_values = part.data
                elif part.event == "error":
                    raise RuntimeError(f"error event: {part.data}")
            end = time.perf_counter() - t0
            if first is None or not holds_ok(last_values):
                raise RuntimeError(f"no values event with the node's answer (last values: {last_values!r})")
        except Exception as e:  # noqa: BLE001 - counted and reported
            errors += 1
            first_error = first_error or f"{type(e).__name__}: {e}"[:300]
            continue
        if i >= a.warmup:
            firsts.append(first * 1000)
            ends.append(end * 1000)
    return {
        "runs": len(firsts), "warmup": a.warmup, "thread": a.thread, "errors": errors, "first_error": first_error,
        "first_values_p50_ms": pct(firsts, 0.5), "first_values_p90_ms": pct(firsts, 0.9),
        "first_values_mean_ms": statistics.fmean(firsts) if firsts else None,
        "stream_end_p50_ms": pct(ends, 0.5), "stream_end_p90_ms": pct(ends, 0.9),
    }


def throughput(a: argparse.Namespace, url: str) -> dict[str, Any]:
    from langgraph_sdk import get_sync_client

    lock = threading.Lock()
    latencies: list[float] = []
    counts = {"ok": 0, "errors": 0}
    first_error: list[str] = []
    clock = {"t0": 0.0, "deadline": 0.0}
    finished: list[float] = []

    def open_clock() -> None:  # run once, by the last client to reach the gate, before any passes
        clock["t0"] = time.perf_counter()
        clock["deadline"] = clock["t0"] + a.seconds

    gate = threading.Barrier(a.clients, action=open_clock)

    def one(client: Any) -> None:
        values = client.runs.wait(None, GRAPH, input=INPUT)
        if not holds_ok(values):
            raise RuntimeError(f"unexpected values: {values!r}"[:300])

    def loop() -> None:
        client = get_sync_client(url=url, api_key=None, timeout=PATIENCE_S)
        for _ in range(2):  # warm-up of each client (its connection), not counted
            try:
                one(client)
            except Exception:  # noqa: BLE001
                pass
        gate.wait()
        while time.perf_counter() < clock["deadline"]:
            t0 = time.perf_counter()
            try:
                one(client)
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    counts["errors"] += 1
                    if not first_error:
                        first_error.append(f"{type(e).__name__}: {e}"[:300])
                continue
            took = time.perf_counter() - t0
            with lock:
                counts["ok"] += 1
                latencies.append(took * 1000)
        with lock:
            finished.append(time.perf_counter())

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(a.seconds + 2 * PATIENCE_S)
    elapsed = (max(finished) if finished else time.perf_counter()) - clock["t0"]
    return {
        "clients": a.clients, "seconds": a.seconds, "elapsed_s": elapsed, "ok": counts["ok"],
        "errors": counts["errors"], "first_error": first_error[0] if first_error else None,
        "runs_per_s": counts["ok"] / elapsed if elapsed > 0 else None,
        "wait_p50_ms": pct(latencies, 0.5), "wait_p90_ms": pct(latencies, 0.9),
    }


def measure(name: str, a: argparse.Namespace, url: str) -> dict[str, Any]:
    log(f"  first values: {a.warmup} warm-up + {a.runs} runs, thread={a.thread} ...")
    fv = first_values(a, url)
    log(f"    p50 {fmt(fv['first_values_p50_ms'])} ms, p90 {fmt(fv['first_values_p90_ms'])} ms, errors {fv['errors']}")
    log(f"  runs/s: {a.clients} clients x {a.seconds:g} s of runs.wait(None, ...) ...")
    tp = throughput(a, url)
    log(f"    {fmt(tp['runs_per_s'])} runs/s ({tp['ok']} ok, {tp['errors']} errors)")
    return {"first_values": fv, "throughput": tp}


# --- output -------------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(x: float | None, y: float | None) -> str:
    return "-" if x is None or y is None or y == 0 else f"{x / y:.2f}"


def table(result: dict[str, Any]) -> str:
    s = result.get("stepwise") or {}
    g = result.get("langgraph") or {}

    def get(side: dict[str, Any], part: str, key: str) -> float | None:
        value = (side.get(part) or {}).get(key)
        return value if isinstance(value, (int, float)) else None

    rows = [
        ("first values p50 (ms)", "first_values", "first_values_p50_ms", 1),
        ("first values p90 (ms)", "first_values", "first_values_p90_ms", 1),
        ("stream end p50 (ms)", "first_values", "stream_end_p50_ms", 1),
        ("stream end p90 (ms)", "first_values", "stream_end_p90_ms", 1),
        ("stream errors", "first_values", "errors", 0),
        ("runs/s (runs.wait)", "throughput", "runs_per_s", 1),
        ("runs.wait p50 (ms)", "throughput", "wait_p50_ms", 1),
        ("runs.wait p90 (ms)", "throughput", "wait_p90_ms", 1),
        ("runs.wait ok / errors", "throughput", None, 0),
    ]
    lines = [f"{'':24} {'Stepwise':>12} {'LangGraph dev':>14} {'Stepwise/LG':>12}"]
    for label, part, key, digits in rows:
        if key is None:
            cells = []
            for side in (s, g):
                tp = side.get("throughput")
                cells.append(f"{tp['ok']} / {tp['errors']}" if tp else "-")
            lines.append(f"{label:24} {cells[0]:>12} {cells[1]:>14} {'':>12}")
            continue
        x, y = get(s, part, key), get(g, part, key)
        r = ratio(x, y) if key != "errors" else ""
        lines.append(f"{label:24} {fmt(x, digits):>12} {fmt(y, digits):>14} {r:>12}")
    return "\n".join(lines)


# --- main ---------------------------------------------------------------------------------------


def run_side(name: str, a: argparse.Namespace, binary: str, result: dict[str, Any], temps: list[Path]) -> None:
    procs: list[Proc] = []
    tmp = Path(tempfile.mkdtemp(prefix=f"lgapi-{name}-"))
    temps.append(tmp)
    log(f"{name}: (temp dir {tmp})")
    try:
        url = start_stepwise(a, binary, tmp, procs) if name == "stepwise" else start_langgraph(a, tmp, procs)
        result[name] = measure(name, a, url)
        result[name]["url"] = url
    except Exception as e:  # noqa: BLE001 - reported, the other side still runs
        log(f"  {name} FAILED: {type(e).__name__}: {e}")
        result[name] = {"error": f"{type(e).__name__}: {e}"}
    finally:
        for proc in reversed(procs):
            proc.stop()


def main() -> None:
    a = parse_args()
    if not have_client_modules():
        client = Path(a.client_python)
        if client.is_file() and os.path.realpath(client) != os.path.realpath(sys.executable) \
                and not os.environ.get("LGAPI_BENCH_REEXEC"):
            os.environ["LGAPI_BENCH_REEXEC"] = "1"
            os.execv(str(client), [str(client), str(Path(__file__).resolve()), *sys.argv[1:]])
        sys.exit(f"{sys.executable} cannot import langgraph_sdk, langgraph and stepwise; give --client-python")
    a.client_python = a.client_python if Path(a.client_python).is_file() else sys.executable
    os.environ["LGAPI_BENCH_NODE_MS"] = str(a.node_ms)  # for both servers' graphs

    import langgraph_sdk
    from importlib.metadata import version

    binary, binary_line = pick_binary(a.bin) if a.only != "langgraph" else ("", "(not used)")
    lgdev_version = None
    if a.only != "stepwise" and Path(a.langgraph_dev).is_file():
        probe = subprocess.run([str(Path(a.langgraph_dev).with_name("python")), "-c",
                                "from importlib.metadata import version as v; "
                                "print(v('langgraph-api'), v('langgraph-runtime-inmem'), v('langgraph'))"],
                               capture_output=True, text=True, timeout=60)
        lgdev_version = probe.stdout.strip() or probe.stderr.strip()[-200:]
    result: dict[str, Any] = {
        "bench": "langgraph_api",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_at_start": os.getloadavg()},
        "stepwise_binary": binary_line,
        "client": {"python": sys.executable, "langgraph_sdk": getattr(langgraph_sdk, "__version__", None),
                   "langgraph": version("langgraph"), "stepwise_client": version("stepwise-client")},
        "langgraph_dev": {"cli": a.langgraph_dev, "langgraph_api / runtime_inmem / langgraph": lgdev_version},
        "params": {"runs": a.runs, "warmup": a.warmup, "thread": a.thread, "clients": a.clients,
                   "seconds": a.seconds, "durability": a.durability, "node_ms": a.node_ms,
                   "graph": "MessagesState, one node, no model"},
    }
    log(f"stepwise binary: {binary_line}")
    log(f"langgraph dev: {a.langgraph_dev} (langgraph-api, runtime-inmem, langgraph: {lgdev_version})")
    log(f"client: {sys.executable}, langgraph_sdk {result['client']['langgraph_sdk']}; {os.cpu_count()} CPUs, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    temps: list[Path] = []

    def on_signal(sig: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {sig}")

    signal.signal(signal.SIGTERM, on_signal)
    try:
        for name in ("stepwise", "langgraph"):
            if a.only in (None, name):
                run_side(name, a, binary, result, temps)
    finally:
        if not a.keep:
            import shutil

            for tmp in temps:
                shutil.rmtree(tmp, ignore_errors=True)
        else:
            log("kept: " + ", ".join(map(str, temps)))
    log("")
    log(f"runs={a.runs} (after {a.warmup} warm-up, thread={a.thread}), clients={a.clients}, seconds={a.seconds:g}; "
        f"{os.cpu_count()} CPUs, load average at start {' '.join(f'{x:.2f}' for x in result['machine']['loadavg_at_start'])}")
    log(f"stepwise: {binary_line}")
    log(table(result))
    text = json.dumps(result, indent=None)
    print(text, flush=True)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
