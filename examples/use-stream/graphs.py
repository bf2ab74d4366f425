"""The graphs the useStream page talks to, served by a Stepwise worker (no LLM):

* ``chat``: one model node, an offline fake chat model that streams ``Echo: <your message>``
  token by token;
* ``approve``: a draft node, then ``interrupt({"question": "Approve the draft?"})`` (the run
  pauses; the page's Approve button resumes it with ``"yes"``), then ``Reviewed: <answer>``.

    pip install "../../clients/python[langgraph]"     # from this directory
    stepwise-worker graphs:worker                      # STEPWISE_URL, default http://127.0.0.1:7777
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

from stepwise import Stepwise
from stepwise.langgraph import StepwiseSaver
from stepwise.worker import Worker


def last_human(state: MessagesState) -> str:
    for message in reversed(state["messages"]):
        if message.type == "human":
            return str(message.content)
    return ""


def echo(state: MessagesState) -> dict[str, Any]:
    model = GenericFakeChatModel(messages=iter([AIMessage(f"Echo: {last_human(state)}")]))
    return {"messages": [model.invoke(state["messages"])]}


chat_builder = StateGraph(MessagesState)
chat_builder.add_node("model", echo)
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

worker = Worker(Stepwise(), concurrency=4)
worker.langgraph("chat", chat, description="Echoes your message, token by token")
worker.langgraph("approve", approve, description="Drafts, then asks for approval")
