"""The LangGraph worker of the useStream example's browser test (tests/use-stream.test.mjs):
the example's own graphs (examples/use-stream/graphs.py: ``chat``, ``approve``) and ``held``, a
graph whose run stays going until the test lets it end, so that the page can be reloaded in the
middle of it:

* ``held``: node ``start`` answers ``Working on: <message>``; node ``finish`` waits until the
  file ``$LG_GATE_DIR/<message>`` exists (the test writes it), then streams
  ``Held answer: <message>`` token by token.

Run it from this directory: ``python -m stepwise.worker langgraph_worker:worker --url URL``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "use-stream"
sys.path.insert(0, str(EXAMPLE))

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402

from graphs import last_human, worker  # noqa: E402

from stepwise import Stepwise  # noqa: E402
from stepwise.langgraph import StepwiseSaver  # noqa: E402

GATES = Path(os.environ.get("LG_GATE_DIR", "."))
# A deadline so that a test that never opens the gate does not hold the worker forever.
PATIENCE_S = 300


def start(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(f"Working on: {last_human(state)}")]}


def finish(state: MessagesState) -> dict[str, Any]:
    name = last_human(state)
    gate = GATES / name
    deadline = time.monotonic() + PATIENCE_S
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    model = GenericFakeChatModel(messages=iter([AIMessage(f"Held answer: {name}")]))
    return {"messages": [model.invoke(state["messages"])]}


held_builder = StateGraph(MessagesState)
held_builder.add_node("start", start)
held_builder.add_node("finish", finish)
held_builder.add_edge(START, "start")
held_builder.add_edge("start", "finish")
held_builder.add_edge("finish", END)
held = held_builder.compile(checkpointer=StepwiseSaver(Stepwise()))

worker.langgraph("held", held, description="Holds its run until the test lets it end")
