"""Graphs served to LangGraph's own SDK (`langgraph_sdk` against ``/langgraph``):

* ``chat``: one model node (an offline fake chat model that streams its tokens) answering
  ``Echo: <last human message>`` (``<prefix>: ...`` with ``configurable.prefix`` in the run's
  config); a message ``raise: TEXT`` makes it raise ``RuntimeError(TEXT)``;
* ``approve``: a draft node, then ``interrupt({"question": ...})``, then a node writing the
  answer it was given;
* ``counter``: a state that is not messages: ``count`` is added to by two nodes in a row, and
  ``log`` is appended to (for forks from a past checkpoint); its first node writes a
  ``custom`` chunk;
* ``outer``: ``counter``'s two nodes as a subgraph;
* ``relay``: three nodes in a row; the worker SIGKILLs itself in node ``b`` once when
  ``$WORKER_DIR/crash-in-b`` exists; each node takes a second when the message is ``slow``.
"""

from __future__ import annotations

import operator
import os
import signal
import time
from pathlib import Path
from typing import Annotated, Any

from typing_extensions import TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.config import get_stream_writer
from langgraph.types import interrupt

from stepwise import Stepwise
from stepwise.langgraph import StepwiseSaver
from stepwise.worker import Worker

DIR = Path(os.environ.get("WORKER_DIR", "."))


def last_human(state: MessagesState) -> str:
    for message in reversed(state["messages"]):
        if message.type == "human":
            return str(message.content)
    return ""


def chat_node(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
    asked = last_human(state)
    if asked.startswith("raise: "):
        raise RuntimeError(asked.removeprefix("raise: "))
    prefix = config.get("configurable", {}).get("prefix", "Echo")
    model = GenericFakeChatModel(messages=iter([AIMessage(f"{prefix}: {last_human(state)}")]))
    return {"messages": [model.invoke(state["messages"])]}


chat_builder = StateGraph(MessagesState)
chat_builder.add_node("model", chat_node)
chat_builder.add_edge(START, "model")
chat_builder.add_edge("model", END)
chat = chat_builder.compile(checkpointer=StepwiseSaver(Stepwise()))


def draft(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(f"Draft for: {last_human(state)}")]}


def review(state: MessagesState) -> dict[str, Any]:
    answer = interrupt({"question": "Approve the draft?"})
    return {"messages": [AIMessage(f"Reviewed: {answer}")]}


approve_builder = StateGraph(MessagesState)
approve_builder.add_node("draft", draft)
approve_builder.add_node("review", review)
approve_builder.add_edge(START, "draft")
approve_builder.add_edge("draft", "review")
approve_builder.add_edge("review", END)
approve = approve_builder.compile(checkpointer=StepwiseSaver(Stepwise()))


class Counter(TypedDict):
    count: int
    log: Annotated[list[str], operator.add]


def first(state: Counter) -> dict[str, Any]:
    get_stream_writer()({"progress": "first"})
    return {"count": state.get("count", 0) + 1, "log": ["first"]}


def second(state: Counter) -> dict[str, Any]:
    return {"count": state["count"] + 10, "log": ["second"]}


counter_builder = StateGraph(Counter)
counter_builder.add_node("first", first)
counter_builder.add_node("second", second)
counter_builder.add_edge(START, "first")
counter_builder.add_edge("first", "second")
counter_builder.add_edge("second", END)
counter = counter_builder.compile(checkpointer=StepwiseSaver(Stepwise()))


# --- a graph with a subgraph: `outer` runs `inner` (two nodes) as its node `nested`.

inner_builder = StateGraph(Counter)
inner_builder.add_node("first", first)
inner_builder.add_node("second", second)
inner_builder.add_edge(START, "first")
inner_builder.add_edge("first", "second")
inner_builder.add_edge("second", END)
inner = inner_builder.compile()

outer_builder = StateGraph(Counter)
outer_builder.add_node("nested", inner)
outer_builder.add_edge(START, "nested")
outer_builder.add_edge("nested", END)
outer = outer_builder.compile(checkpointer=StepwiseSaver(Stepwise()))


def relay_node(name: str):
    def run_node(state: MessagesState) -> dict[str, Any]:
        crash = DIR / f"crash-in-{name}"
        if crash.exists():
            crash.unlink()
            os.kill(os.getpid(), signal.SIGKILL)
        if last_human(state) == "slow":
            time.sleep(1.0)
        return {"messages": [AIMessage(f"{name} done")]}

    return run_node


relay_builder = StateGraph(MessagesState)
for name in ("a", "b", "c"):
    relay_builder.add_node(name, relay_node(name))
relay_builder.add_edge(START, "a")
relay_builder.add_edge("a", "b")
relay_builder.add_edge("b", "c")
relay_builder.add_edge("c", END)
relay = relay_builder.compile(checkpointer=StepwiseSaver(Stepwise()))

worker = Worker(Stepwise(), concurrency=2)
worker.langgraph("chat", chat, description="Echoes the last message")
worker.langgraph("approve", approve, description="Drafts, then asks for approval")
worker.langgraph("counter", counter, description="Counts in two nodes")
worker.langgraph("relay", relay, description="Three nodes in a row")
worker.langgraph("outer", outer, description="A subgraph of two nodes")
