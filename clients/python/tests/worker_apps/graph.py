"""A LangGraph worker: plan, then ask the user for a city (``interrupt``), then book.
The graph's checkpoints are kept by `StepwiseSaver`."""

from __future__ import annotations

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

from stepwise import Stepwise
from stepwise.langgraph import StepwiseSaver
from stepwise.worker import Worker


def plan(state: MessagesState) -> dict:
    return {"messages": [AIMessage("Planning the trip")]}


def ask(state: MessagesState) -> dict:
    city = interrupt("Which city?")
    return {"messages": [AIMessage(f"Booked a trip to {city}")]}


builder = StateGraph(MessagesState)
builder.add_node("plan", plan)
builder.add_node("ask", ask)
builder.add_edge(START, "plan")
builder.add_edge("plan", "ask")
builder.add_edge("ask", END)
graph = builder.compile(checkpointer=StepwiseSaver(Stepwise()))

worker = Worker(Stepwise(), concurrency=2)
worker.langgraph("trip", graph, description="Books trips")


# --- three steps in a row (`relay`): the worker SIGKILLs itself in node b once when
# $WORKER_DIR/crash-in-b exists.

import os  # noqa: E402
import signal  # noqa: E402
from pathlib import Path  # noqa: E402

DIR = Path(os.environ.get("WORKER_DIR", "."))


def node(name: str):
    def run_node(state: MessagesState) -> dict:
        crash = DIR / f"crash-in-{name}"
        if crash.exists():
            crash.unlink()
            os.kill(os.getpid(), signal.SIGKILL)
        return {"messages": [AIMessage(f"{name} done")]}

    return run_node


relay_builder = StateGraph(MessagesState)
for name in ("a", "b", "c"):
    relay_builder.add_node(name, node(name))
relay_builder.add_edge(START, "a")
relay_builder.add_edge("a", "b")
relay_builder.add_edge("b", "c")
relay_builder.add_edge("c", END)
relay = relay_builder.compile(checkpointer=StepwiseSaver(Stepwise()))
worker.langgraph("relay", relay, description="Three nodes in a row")
