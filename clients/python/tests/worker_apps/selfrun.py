"""A worker module that runs its worker itself when imported (``worker.run()`` at the end, as a
script would), started with ``stepwise-worker worker_apps.selfrun:worker``."""

from __future__ import annotations

from stepwise import Stepwise
from stepwise.worker import Run, Worker

worker = Worker(Stepwise())


@worker.agent("selfrun", description="Says hello from a module that runs its own worker")
def selfrun(run: Run) -> str:
    return f"hello, {run.input_text}"


worker.run()
