"""A plain-function agent doing its work through `run.call`, for the replay tests.

Files in ``$WORKER_DIR`` drive and record it:
  calls.log          "<execution> <tool>" for every time a tool really runs (across processes)
  crash-in-<tool>    the worker SIGKILLs itself when that tool starts (the file is removed first)
  hold-book          while it exists, each attempt waits before its `book` call until
                     ``gate-book-<attempt>`` exists (a test freezes the worker there)
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from stepwise import Stepwise
from stepwise.worker import Run, Worker

DIR = Path(os.environ.get("WORKER_DIR", "."))
_log_lock = threading.Lock()

worker = Worker(Stepwise(), concurrency=int(os.environ.get("WORKER_CONCURRENCY", "2")))


def _tool(run: Run, tool: str) -> None:
    """Records that `tool` runs now (or dies here when asked to)."""
    crash = DIR / f"crash-in-{tool}"
    if crash.exists():
        crash.unlink()
        os.kill(os.getpid(), signal.SIGKILL)
    with _log_lock, open(DIR / "calls.log", "a") as f:
        f.write(f"{run.execution_id} {tool}\n")


@worker.agent("travel", description="Plans a trip with six tools")
def travel(run: Run) -> dict[str, Any]:
    def search(city: str) -> list[str]:
        _tool(run, "search")
        return [f"{city} hotel", f"{city} hostel"]

    def weather(city: str) -> dict[str, Any]:
        _tool(run, "weather")
        raise LookupError(f"no forecast for {city}")

    def price(options: list[str], nights: int) -> dict[str, float]:
        _tool(run, "price")
        return {option: (120.5 if "hotel" in option else 30.25) * nights for option in options}

    def book(option: str, *, nights: int) -> dict[str, Any]:
        _tool(run, "book")
        return {"booking": f"{option} x{nights}", "ok": True, "nested": {"list": [1, 2, None]}}

    def confirm(booking: dict[str, Any]) -> str:
        _tool(run, "confirm")
        return f"confirmed {booking['booking']}"

    def notify(text: str) -> None:
        _tool(run, "notify")

    city = run.input_text
    options = run.call("search", search, city)
    try:
        forecast: Any = run.call("weather", weather, city)
    except LookupError as error:  # raised again on a replay: the same path is taken
        forecast = {"unknown": str(error)}
    prices = run.call("price", price, options, 2)
    cheapest = min(prices, key=lambda option: prices[option])
    run.step(kind="planning", model_output=f"{cheapest} is the cheapest of {len(options)}; forecast {forecast}")
    if (DIR / "hold-book").exists():
        while not (DIR / f"gate-book-{run.attempt}").exists():
            time.sleep(0.02)
    booking = run.call("book", book, cheapest, nights=2)
    confirmation = run.call("confirm", confirm, booking)
    run.call("notify", notify, confirmation)
    return {"booking": booking, "prices": prices, "forecast": forecast, "confirmation": confirmation,
            "attempt": run.attempt}
