"""Plain-function agents for the worker tests.

Files in ``$WORKER_DIR`` drive and record them:
  crash-at-<n>        (counter) the worker SIGKILLs itself when it is about to save step n
  gate-<attempt>      (counter, with ``gate`` in the input) step 2 of that attempt waits for it
  <execution>-<attempt>.json   (counter) how the attempt ended: {"cancelled", "reason", "wrote"}
  <execution>.cancelled        (sleeper) written when the agent sees the cancel
  order.log           (recorder) "start|end <session> <text> <execution>" lines
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path

from stepwise import Stepwise
from stepwise.worker import Retry, Run, Worker

DIR = Path(os.environ.get("WORKER_DIR", "."))
_log_lock = threading.Lock()

worker = Worker(Stepwise(), concurrency=int(os.environ.get("WORKER_CONCURRENCY", "4")))


@worker.agent("greeter", description="Says hello")
def greeter(run: Run) -> str:
    run.step(model_output="Greeting the user", observations="said hello")
    return f"Hello, {run.input_text}"


@worker.agent("streamer", description="Streams its answer")
def streamer(run: Run) -> str:
    for part in ("Hel", "lo ", "there"):
        run.delta(part)
    return "Hello there"


@worker.agent("counter", description="Saves N steps, then answers")
def counter(run: Run) -> dict:
    """Input ``steps:N`` (optionally `` gate``): saves steps 1..N, one per action; on a new
    claim the steps a lost worker saved are replayed (its observations say which attempt
    wrote each), and only the rest are written."""
    words = run.input_text.split()
    total = int(words[0].split(":")[1])
    wrote: list[int] = []
    try:
        for number in range(1, total + 1):
            if run.replaying:  # saved by an earlier attempt: this returns it, writing nothing
                run.step(model_output=f"step {number}")
                continue
            if (DIR / f"crash-at-{number}").exists():
                (DIR / f"crash-at-{number}").unlink()
                os.kill(os.getpid(), signal.SIGKILL)
            if "gate" in words and number == 2:
                gate = DIR / f"gate-{run.attempt}"
                while not gate.exists():
                    time.sleep(0.02)
            run.step(model_output=f"step {number}", observations=f"attempt {run.attempt}")
            wrote.append(number)
        return {"steps": total, "attempt": run.attempt}
    finally:
        (DIR / f"{run.execution_id}-{run.attempt}.json").write_text(
            json.dumps({"cancelled": run.cancelled, "reason": run.cancel_reason, "wrote": wrote})
        )


@worker.agent("asker", description="Asks for a name")
def asker(run: Run) -> str:
    name = run.ask("What is your name?")
    city = run.ask(f"Where do you live, {name}?")
    return f"Hi {name} from {city}"


@worker.agent("sleeper", description="Runs until it is stopped")
def sleeper(run: Run) -> str:
    run.step(model_output="waiting")
    while not run.cancelled:
        time.sleep(0.02)
    (DIR / f"{run.execution_id}.{run.cancel_reason}").write_text(str(run.attempt))
    run.check()
    return "unreachable"


@worker.agent("resumable", description="Waits once, answers on its next attempt")
def resumable(run: Run) -> dict:
    """The first attempt waits (until the worker stops it); a later claim answers with the
    attempt it got."""
    if not run.steps:
        run.step(model_output="started")
        while True:
            run.check()
            time.sleep(0.02)
    return {"attempt": run.attempt, "steps": len(run.steps)}


@worker.agent("recorder", description="Records when it runs")
def recorder(run: Run) -> str:
    def log(what: str) -> None:
        with _log_lock, open(DIR / "order.log", "a") as f:
            f.write(f"{what} {run.session_id} {run.input_text} {run.execution_id}\n")

    log("start")
    time.sleep(0.01)
    run.step(model_output=f"recorded {run.input_text}")
    log("end")
    return run.input_text


@worker.agent("failing", description="Always fails")
def failing(run: Run) -> None:
    raise ValueError("boom\nsecond line")


@worker.agent("flaky", description="Fails its first attempt with retry")
def flaky(run: Run) -> str:
    if run.attempt == 1:
        raise Retry("not yet")
    return f"ok on attempt {run.attempt}"


@worker.agent("async-greeter", description="An async agent")
async def async_greeter(run: Run) -> dict:
    await run.astep(model_output="async step")
    await asyncio.sleep(0.01)
    return {"greeting": f"Hello, {run.input_text}", "attempt": run.attempt}


@worker.agent("parent", description="Asks a subagent")
def parent(run: Run) -> str:
    answer = run.subagent("greeter", "child")
    run.step(model_output=f"the subagent said {answer}")
    return f"sub: {answer}"


@worker.agent("stubborn", description="Ignores being asked to stop")
def stubborn(run: Run) -> str:
    run.step(model_output="not stopping")
    while not run.lease_lost:
        time.sleep(0.02)
    return "gave up"
